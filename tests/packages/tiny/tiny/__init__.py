"""The tiny fixture package."""
import json
import os


def greet(name):
    return "hello " + name


def build_info():
    with open(os.path.join(os.path.dirname(__file__), "_build_info.json")) as f:
        return json.load(f)

"""Demo suite (stands in for intel/auto-round): the pure-Python root package."""
from setuptools import setup

setup(name="demo-suite", version="0.5.0", packages=["demo_suite"])

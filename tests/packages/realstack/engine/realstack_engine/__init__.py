"""realstack engine (stands in for vLLM): answers prompts."""


def generate(prompt):
    return "realstack engine: " + prompt

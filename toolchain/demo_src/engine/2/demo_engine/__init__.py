"""Demo engine: loads the kernels and answers."""


def generate(prompt):
    return "Hello from the demo engine: " + prompt

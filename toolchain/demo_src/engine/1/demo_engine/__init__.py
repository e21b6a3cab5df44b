"""Demo engine: loads the kernels and answers."""


def generate(prompt):
    return "hello"

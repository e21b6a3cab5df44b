"""Build the Intel XPU LLM serving stack (vLLM, vllm-xpu-kernels, ARK) from pinned recipes."""

__version__ = "0.1.0"

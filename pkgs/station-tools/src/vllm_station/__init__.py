"""Operator tools for vLLM on NVIDIA DGX Station GB300."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vllm-station")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+src"

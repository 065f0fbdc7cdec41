"""Test and benchmark support: throwaway servers, the local stack, stand-ins of hosted APIs, matting metrics, headless
Chromium for browser tests.

Used by ``tests/`` and ``benchmarks/``; no production module imports it (``tests/test_import_graph.py`` checks).
"""

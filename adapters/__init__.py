"""Model adapters: the canonical message format (``canonical``) and the providers behind
one streaming interface (``base``). Import submodules directly; importing this package
loads no provider SDK.
"""

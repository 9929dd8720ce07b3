"""The top layer: the ``jobs`` command (``cli.py``) and the demos (``demos/``).

Everything here uses the packages below it (``pipeline`` > ``processors`` > ``monitor`` >
``jobs``) and nothing below imports it."""

"""Trust: what a model may reach, and what never leaves cortex.

- ``scope``: ``Scope``, the part of a notebook namespace a model is given with ``$name``;
- ``reach``: what one step of a ``$name.path`` may go through, written as an allow-list;
- ``secrets``: redaction: the text cortex shows, saves or sends has every secret replaced;
- ``bounded``: reprs and cuts of any value that stay short and never leak a secret;
- ``credentials``: which values of the environment are secrets.
"""

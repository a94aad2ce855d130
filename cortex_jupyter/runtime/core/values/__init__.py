"""Values and types: what ``$name`` stands for, and the shapes values are fitted to.

- ``variables``: ``$name`` references in action parameters, found and resolved through
  the scopes (``trust``) a run is given;
- ``answer``: the one ``$name`` rule for filling the answer a person reads with values;
- ``typed``: typed answers (``output_type``): the JSON read from the answer, ``"$name"``
  filled, pydantic's validation, errors as data;
- ``schema``: JSON schemas for registered functions, from signatures, hints and docstrings;
- ``coerce``: fitting a ``$name`` value to the type its parameter declares, when nothing
  is lost.
"""

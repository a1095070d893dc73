"""The ``sparklog`` command line."""

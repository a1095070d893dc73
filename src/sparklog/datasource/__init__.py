"""The PySpark Python Data Source ``sparklog``."""

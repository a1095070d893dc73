"""Kafka's wire protocol over sparklog's logs (in progress): the record batch codec."""

"""Several hosts on one machine (network namespaces) and what runs on them."""

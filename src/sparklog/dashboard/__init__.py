"""The Grafana dashboard over the brokers' metrics (:mod:`.panels`), and its picture drawn from a
real run's recorded metrics with the dashboard's own queries (:mod:`.promql`, :mod:`.recording`,
:mod:`.scenario`, :mod:`.picture`)."""

"""The service side of tunehub: settings, the SQL tuning database and the tuner."""

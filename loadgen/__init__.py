"""Publication load with Locust (its own process: gevent). See loadgen/locustfile.py."""

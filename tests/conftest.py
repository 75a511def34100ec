pytest_plugins = ["memq.testing"]

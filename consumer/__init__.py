"""The MemQ consumer: notification polling, direct object fetch with prefetch, commits, seeks."""

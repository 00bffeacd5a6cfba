"""Run specs submitted on a cron schedule by the long-lived owner's scheduler thread."""

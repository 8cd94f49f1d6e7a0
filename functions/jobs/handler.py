"""Lambda entrypoint: scheduled jobs; EventBridge Scheduler sends {"job": NAME}."""

from flowledger.jobs import jobs_handler

handler = jobs_handler()

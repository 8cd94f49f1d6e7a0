#!/bin/sh
# Lambda Web Adapter (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap) starts this script and proxies each
# invocation to the ASGI chat app. Two functions run it (infra/constructs/chat.py): the streaming one
# (AWS_LWA_INVOKE_MODE=response_stream) and the buffered one for the other chat routes (buffered).
exec python -m uvicorn --factory flowledger.api.chat_app:create_app \
  --host 127.0.0.1 --port "${AWS_LWA_PORT:-8080}" --no-access-log --log-level warning

// The OpenTelemetry JavaScript SDK's OTLP/HTTP exporter, which sends JSON: an agent span and its tool call,
// sent where OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_HEADERS say (tests/e2e/test_otlp_http.py).
// Prints the two spans' ids as JSON once the provider has flushed them.
const { context, trace } = require("@opentelemetry/api");
const { OTLPTraceExporter } = require("@opentelemetry/exporter-trace-otlp-http");
const { resourceFromAttributes } = require("@opentelemetry/resources");
const { SimpleSpanProcessor, TracerProvider } = require("@opentelemetry/sdk-trace");

async function main() {
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": "js-agent", "flowledger.patient_id": process.argv[2] }),
    spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter() })],
  });
  const tracer = provider.getTracer("flowledger-test");
  const agent = tracer.startSpan("invoke_agent js", {
    attributes: { "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "js-agent" },
  });
  const tool = tracer.startSpan(
    "execute_tool lookup_order",
    {
      attributes: {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup_order",
        "gen_ai.tool.call.arguments": JSON.stringify({ order: 12 }),
        "gen_ai.tool.call.result": "shipped on Monday",
      },
    },
    trace.setSpan(context.active(), agent),
  );
  tool.end();
  agent.end();
  await provider.shutdown();
  console.log(JSON.stringify({ trace_id: agent.spanContext().traceId, agent: agent.spanContext().spanId, tool: tool.spanContext().spanId }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

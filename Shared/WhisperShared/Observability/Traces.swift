import Foundation
import Instrumentation
import Logging
import OTel
import ServiceContextModule
import ServiceLifecycle
import Synchronization
import Tracing

/// Distributed traces over OTLP/HTTP, off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or its
/// traces variant) is set; while off the message path does no tracing work (`isEnabled`).
/// A message's trace crosses the router stream (`tp`) and the `deliver` command; spans
/// carry frame types and message IDs, never content, keys or tokens (docs/operations.md,
/// "Traces").
public enum WhisperTracing {
    private static let enabled = Atomic<Bool>(false)

    /// True once this process exports traces.
    public static var isEnabled: Bool { enabled.load(ordering: .relaxed) }

    /// Whether the environment asks for traces.
    public static func requested(in environment: [String: String]) -> Bool {
        guard environment["OTEL_SDK_DISABLED"]?.lowercased() != "true", environment["OTEL_TRACES_EXPORTER"]?.lowercased() != "none" else {
            return false
        }
        return [environment["OTEL_EXPORTER_OTLP_ENDPOINT"], environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]]
            .contains { !($0 ?? "").isEmpty }
    }

    /// Sets up the exporter when the environment asks for it (once per process) and
    /// returns the service that sends the spans, to run with the others; nil when traces
    /// stay off. Logs and metrics stay where they are (JSON lines, Prometheus).
    public static func bootstrap(service: String, logger: Logger, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> (any Service)? {
        guard requested(in: environment) else { return nil }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "whisper-\(service)"
        configuration.diagnosticLogger = .custom(logger)
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        InstrumentationSystem.bootstrap(backend.factory)
        enabled.store(true, ordering: .relaxed)
        logger.info("tracing_enabled", metadata: ["serviceName": "whisper-\(service)"])
        return backend.service
    }

    /// The W3C `traceparent` of the span in `context`, to carry across a hop.
    public static func traceparent(of context: ServiceContext) -> String? {
        var carrier: [String: String] = [:]
        InstrumentationSystem.instrument.inject(context, into: &carrier, using: DictionaryInjector())
        return carrier["traceparent"]
    }

    /// A context that continues the trace of `traceparent` (nil: a new trace begins).
    public static func context(continuing traceparent: String?) -> ServiceContext {
        var context = ServiceContext.topLevel
        guard let traceparent, Self.isTraceparent(traceparent) else { return context }
        InstrumentationSystem.instrument.extract(["traceparent": traceparent], into: &context, using: DictionaryExtractor())
        return context
    }

    /// `00-<32 hex>-<16 hex>-<2 hex>`: anything else from outside is ignored.
    public static func isTraceparent(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        guard bytes.count == 55, bytes[2] == UInt8(ascii: "-"), bytes[35] == UInt8(ascii: "-"), bytes[52] == UInt8(ascii: "-") else { return false }
        return bytes.enumerated().allSatisfy { index, byte in
            [2, 35, 52].contains(index) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
        }
    }

    struct DictionaryInjector: Injector {
        func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
            carrier[key] = value
        }
    }

    struct DictionaryExtractor: Extractor {
        func extract(key: String, from carrier: [String: String]) -> String? {
            carrier[key]
        }
    }
}

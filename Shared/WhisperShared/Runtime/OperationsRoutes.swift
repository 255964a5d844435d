import Foundation
import Hummingbird
import Synchronization

/// `GET /health`, `GET /ready` and `GET /metrics`, the same on every service.
public struct OperationsRoutes<Context: RequestContext>: Sendable {
    let environment: ServiceEnvironment
    let readiness: Readiness
    /// Set while the service drains: `/ready` then answers 503 so the load balancer stops sending.
    let draining: DrainFlag

    public init(environment: ServiceEnvironment, readiness: Readiness, draining: DrainFlag = DrainFlag()) {
        self.environment = environment
        self.readiness = readiness
        self.draining = draining
    }

    public func register(on router: Router<Context>) {
        let service = environment.settings.service
        let instance = environment.settings.instanceID
        router.get("/health") { _, _ in
            Self.json(.ok, ["status": "ok", "service": service, "instance": instance])
        }
        router.get("/ready") { _, _ in
            let results = await readiness.evaluate()
            for (name, result) in results {
                environment.metrics.recordDependency(name, up: result.isOK)
            }
            var checks: [String: String] = [:]
            for (name, result) in results {
                switch result {
                case .ok: checks[name] = "ok"
                case .failed(let reason): checks[name] = reason
                }
            }
            let isDraining = draining.isDraining
            if isDraining { checks["draining"] = "shutting down" }
            let ready = !isDraining && results.allSatisfy { $0.result.isOK }
            let body: [String: any Sendable] = ["status": ready ? "ready" : "not_ready", "service": service, "checks": checks]
            return Self.json(ready ? .ok : .serviceUnavailable, body)
        }
        router.get("/metrics") { _, _ in
            await environment.probeClients()
            environment.metrics.record(redis: environment.redis.statistics)
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: environment.metrics.render())))
        }
    }

    static func json(_ status: HTTPResponse.Status, _ object: [String: any Sendable]) -> Response {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// Whether the service has started to shut down.
public final class DrainFlag: Sendable {
    private let state = Atomic<Bool>(false)

    public init() {}

    public var isDraining: Bool { state.load(ordering: .relaxed) }

    public func startDraining() { state.store(true, ordering: .relaxed) }
}

/// Counts every HTTP request and its latency in the service's metrics.
public struct HTTPMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServiceMetrics

    public init(metrics: ServiceMetrics) {
        self.metrics = metrics
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        do {
            let response = try await next(request, context)
            metrics.recordHTTPRequest(method: request.method.rawValue, status: response.status.code, duration: .now - start)
            return response
        } catch let error as WhisperHTTPError {
            metrics.recordHTTPRequest(method: request.method.rawValue, status: error.status.code, duration: .now - start)
            metrics.recordError(error.error.code, transport: .http)
            throw error
        } catch let error as HTTPResponseError {
            metrics.recordHTTPRequest(method: request.method.rawValue, status: error.status.code, duration: .now - start)
            throw error
        } catch {
            metrics.recordHTTPRequest(method: request.method.rawValue, status: 500, duration: ContinuousClock.now - start)
            metrics.recordError(.internalError, transport: .http)
            throw error
        }
    }
}

import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// The internal frame endpoints (`POST /internal/v1/frames/<type>`), behind the internal
/// token (and `previousToken` during a rotation), compared in constant time. The answer is
/// always 200 with the server frame to write: a `WhisperError` as its `error` frame,
/// anything else `INTERNAL_ERROR`.
public struct InternalFrameEndpoints: Sendable {
    let internalToken: [UInt8]
    let previousToken: [UInt8]
    let metrics: ServiceMetrics
    let logger: Logger

    public init(internalToken: String, previousToken: String? = nil, metrics: ServiceMetrics, logger: Logger) {
        self.internalToken = Array(internalToken.utf8)
        self.previousToken = Array((previousToken ?? "").utf8)
        self.metrics = metrics
        self.logger = logger
    }

    public func register<P: ClientPayload, R: ServerPayload>(
        _ type: P.Type, on router: Router<BasicRequestContext>,
        _ handle: @escaping @Sendable (P, ConnectionContext) async throws -> R
    ) {
        let expected = internalToken
        let previous = previousToken
        let metrics = metrics
        let logger = logger
        router.post(RouterPath(stringLiteral: InternalAPI.framePath(P.frameType))) { request, _ -> Response in
            let presented = Array((request.headers[HTTPField.Name(InternalAPI.tokenHeader)!] ?? "").utf8)
            // Both compared, always: the time taken says nothing about which matched.
            let current = !expected.isEmpty && SecureBytes.constantTimeEqual(presented, expected)
            let old = !previous.isEmpty && SecureBytes.constantTimeEqual(presented, previous)
            guard current || old else {
                throw WhisperHTTPError(.authFailed, "internal endpoint")
            }
            let body = try await request.body.collect(upTo: Limits.MAX_WS_FRAME_BYTES * 2)
            let forwarded: InternalFrameRequest<P>
            do {
                forwarded = try JSONDecoder().decode(InternalFrameRequest<P>.self, from: Data(buffer: body))
                try forwarded.payload.validate()
            } catch {
                throw WhisperHTTPError(.invalidPayload, "malformed internal request")
            }
            let bytes: [UInt8]
            do {
                bytes = ServerFrameCodec.encode(try await handle(forwarded.payload, forwarded.context), requestId: forwarded.requestId)
            } catch let error as WhisperError {
                metrics.recordError(error.code)
                bytes = ServerFrameCodec.encodeError(error.code, error.message, requestId: forwarded.requestId)
            } catch {
                metrics.recordError(.internalError)
                logger.error("frame_failed", metadata: ["type": "\(P.frameType.rawValue)", "error": "\(error)", "connId": "\(forwarded.context.connId)"])
                bytes = ServerFrameCodec.encodeError(.internalError, "the server failed; try again", requestId: forwarded.requestId)
            }
            var headers = HTTPFields()
            headers[.contentType] = "application/json"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
        }
    }
}

extension SettingsReader {
    /// The shared internal token (`WHISPER_INTERNAL_TOKEN`, at least 32 characters) and
    /// where a service's internal frame endpoints listen: `<PREFIX>_INTERNAL_HTTP_HOST`
    /// (default: the public host) and `<PREFIX>_INTERNAL_HTTP_PORT`, which must differ
    /// from the public port.
    public func internalEndpoint(service: String, defaultPort: Int, public common: CommonSettings) -> (token: String, http: HTTPSettings) {
        let token = requiredString("whisper.internal.token", secret: true)
        if !token.isEmpty, token.utf8.count < 32 {
            reject("whisper.internal.token", because: "must be at least 32 characters")
        }
        let prefix = service.replacingOccurrences(of: "-", with: ".")
        let http = HTTPSettings(
            host: string("\(prefix).internal.http.host", default: common.http.host),
            port: int("\(prefix).internal.http.port", default: defaultPort, range: 0...65535)
        )
        if http.port != 0, http.port == common.http.port {
            reject("\(prefix).internal.http.port", because: "must differ from \(Self.variableName("\(prefix).http.port"))")
        }
        return (token, http)
    }

    /// `WHISPER_INTERNAL_TOKEN_PREVIOUS`: the token being rotated out, still accepted
    /// from gateways that have not restarted yet; nil when not set.
    public func previousInternalToken() -> String? {
        let token = string("whisper.internal.token.previous", default: "", secret: true)
        if !token.isEmpty, token.utf8.count < 32 {
            reject("whisper.internal.token.previous", because: "must be at least 32 characters")
        }
        return token.isEmpty ? nil : token
    }
}

extension SessionStore {
    /// The token of `Authorization: Bearer <sessionToken>`; nil without one.
    public static func bearerToken(of request: Request) -> String? {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { return nil }
        return String(header.dropFirst("Bearer ".count))
    }

    /// The session behind `Authorization: Bearer <sessionToken>`, or 401 `NOT_REGISTERED`.
    public func authenticate(_ request: Request) async throws -> SessionRecord {
        guard let token = Self.bearerToken(of: request), let record = try await lookup(token) else {
            throw WhisperHTTPError(.notRegistered, "a valid session token is required", headers: [.wwwAuthenticate: "Bearer"])
        }
        return record
    }
}

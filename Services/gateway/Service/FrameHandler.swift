import Foundation
import Logging
import WhisperShared

/// What the gateway does with each frame: the checks of spec 3.1 in order (size is
/// enforced by the WebSocket layer), then the session check for privileged frames,
/// then the frame's own handler.
struct FrameHandler: Sendable {
    let environment: ServiceEnvironment
    let decoder = ClientFrameDecoder()

    func handle(_ bytes: [UInt8], on connection: ClientConnection) async {
        let frame: InboundFrame
        switch decoder.decode(bytes) {
        case .success(let decoded):
            frame = decoded
        case .failure(let rejection):
            connection.logger.info("frame_rejected", metadata: [
                "code": "\(rejection.code.rawValue)", "reason": "\(rejection.message)", "sizeBytes": "\(bytes.count)",
            ])
            await reply(error: rejection.code, rejection.message, requestId: rejection.requestId, on: connection)
            return
        }
        if frame.type.isPrivileged {
            guard let token = frame.sessionToken, await sessionExists(token) else {
                await reply(error: .notRegistered, "no valid session for this connection; register first", requestId: frame.requestId, on: connection)
                return
            }
        }
        switch frame.payload {
        case is Ping:
            try? await connection.send(Pong(serverTime: Clock.millisecondsNow()), requestId: frame.requestId)
        default:
            connection.logger.warning("frame_not_served", metadata: ["type": "\(frame.type.rawValue)"])
            await reply(error: .internalError, "\(frame.type.rawValue) is not served by this server yet", requestId: frame.requestId, on: connection)
        }
    }

    private func sessionExists(_ token: String) async -> Bool {
        do {
            return try await !environment.redis.send("EXISTS", RedisKeys.session(token)).isIntegerZero
        } catch {
            environment.logger.error("session_lookup_failed", metadata: ["error": "\(error)"])
            return false
        }
    }

    private func reply(error code: ErrorCode, _ message: String, requestId: String?, on connection: ClientConnection) async {
        environment.metrics.recordError(code)
        try? await connection.sendRaw(ServerFrameCodec.encodeError(code, message, requestId: requestId))
    }
}

extension RESPValue {
    var isIntegerZero: Bool { self == .integer(0) }
}

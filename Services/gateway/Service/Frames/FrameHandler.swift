import Logging
import WhisperMessaging
import WhisperShared

/// What the gateway does with each frame, in stages: decode (the checks of
/// docs/protocol.md section 3.1; size is enforced by the WebSocket layer), the control
/// gate, the sender (a session, a listener device, or anyone), the route's limits, then
/// the route's desk (`FrameRoute`, one per frame type in `FrameRoutes.swift`), whose
/// refusals are answered here.
struct FrameHandler: Sendable {
    let environment: ServiceEnvironment
    let binding: SessionBinding
    let forwarding: ServiceForwarding
    let limits: FrameLimits
    let routerStream: RouterStreamDesk
    let receipts: ReceiptDesk
    let typing: TypingDesk
    let watching: PresenceDesk
    /// Serves `send_message`.
    let sends: SendDesk
    let deletions: AccountDeletionDesk
    /// Live text: the sequence and the content (`LiveRelay`).
    let live: LiveRelay
    /// Push-to-talk channels and their floor (`PTTDesk`).
    let ptt: PTTDesk
    let decoder = ClientFrameDecoder()

    /// Handles one frame of the socket; `waitingSince` is since when it has waited for the
    /// gateway (`NIODeadline` uptime, ns; 0 when it did not: `SocketInbox.nextTimed()`).
    /// True when the frame handed its socket over before it was done (`FrameTurn`).
    func handle(_ bytes: [UInt8], waitingSince: UInt64, on connection: ClientConnection, handOver: @escaping @Sendable () -> Void) async -> Bool {
        // Frames a client sent before closing are still handled (a receipt written just
        // before the close must not be lost); the answers have nowhere to go and are
        // dropped. A socket the server ended is not read any further.
        guard !connection.refusesFrames else { return false }
        let frame: InboundFrame
        switch decoder.decode(bytes) {
        case .success(let decoded):
            frame = decoded
        case .failure(let rejection):
            connection.logger.info("frame_rejected", metadata: [
                "code": "\(rejection.code.rawValue)", "reason": "\(rejection.message)", "sizeBytes": "\(bytes.count)",
            ])
            await refuse(rejection.code, rejection.message, requestId: rejection.requestId, on: connection)
            return false
        }
        let route = FrameRoute.table[frame.type] ?? FrameRoute.route(for: frame.type)
        if route.isControl, !admitControl(on: connection) {
            await refuse(over: .controlPerSocket, retryAfterMs: nil, requestId: frame.requestId, on: connection)
            return false
        }
        // A message served here may hand its socket over once its store is written
        // (`SocketTurns`), within the socket's bound of messages in flight.
        if route.type == .sendMessage {
            await connection.turns.waitForRoom()
            let turn = FrameTurn(turns: connection.turns, handOver: handOver)
            await serve(frame, route, waitingSince: waitingSince, turn: turn, on: connection)
            return turn.end()
        }
        await serve(frame, route, waitingSince: waitingSince, turn: nil, on: connection)
        return false
    }

    /// The sender, limits and route stages of a decoded frame, and the answer to a refusal.
    private func serve(_ frame: InboundFrame, _ route: FrameRoute, waitingSince: UInt64, turn: FrameTurn?, on connection: ClientConnection) async {
        do {
            guard try await admitSender(frame, route, on: connection),
                  let served = try await admitLimits(frame, route, waitingSince: waitingSince, turn: turn, on: connection) else { return }
            if route.answersRefusals {
                do {
                    try await route.serve(self, served)
                } catch let refusal as WhisperError {
                    await reply(error: refusal.code, refusal.message, requestId: frame.requestId, on: connection)
                }
            } else {
                try await route.serve(self, served)
            }
        } catch let refusal as FrameRefusal {
            if refusal.counted {
                await refuse(refusal.code, refusal.message, requestId: frame.requestId, on: connection)
            } else {
                await reply(error: refusal.code, refusal.message, requestId: frame.requestId, on: connection)
            }
        } catch {
            environment.logger.error("frame_failed", metadata: ["type": "\(frame.type.rawValue)", "connId": "\(connection.id)", "error": "\(error)"])
            await reply(error: .internalError, "the server failed; try again", requestId: frame.requestId, on: connection)
        }
    }

    /// The sender stage: a session's frame needs a live session for the socket's
    /// identity (and, for control frames, a token of the identity's share of them); a
    /// listener's frame needs the socket's listener device. False once refused.
    private func admitSender(_ frame: InboundFrame, _ route: FrameRoute, on connection: ClientConnection) async throws -> Bool {
        switch route.sender {
        case .anyone:
            return true
        case .session:
            guard let token = frame.sessionToken, try await binding.authorize(token, on: connection) else {
                await refuse(.notRegistered, "no valid session for this connection; register first", requestId: frame.requestId, on: connection)
                return false
            }
            // Session and token frames, per identity across every gateway (one
            // identity may hold sockets on several instances in a row).
            if route.isControl, let whisperId = connection.whisperId,
               case .limited(let retry) = try await limits.limiter.take(.controlPerIdentity, key: whisperId, rules: limits.rules) {
                await refuse(over: .controlPerIdentity, retryAfterMs: retry, requestId: frame.requestId, on: connection)
                return false
            }
            return true
        case .listenerDevice:
            guard let device = connection.liveDevice, !device.isEmpty else {
                await refuse(
                    .notRegistered, "this socket has no listener device: open it with the whisper_live_device cookie (POST /live/devices)",
                    requestId: frame.requestId, on: connection
                )
                return false
            }
            return true
        }
    }

    /// The limits stage: the route's gates in order. Nil once the frame was refused.
    private func admitLimits(
        _ frame: InboundFrame, _ route: FrameRoute, waitingSince: UInt64, turn: FrameTurn?, on connection: ClientConnection
    ) async throws -> FrameRoute.Served? {
        var whisperId: String?
        for gate in route.gates {
            switch gate {
            case .control:
                // Charged before the session stage (`handle`, `admitSender`).
                continue
            case .identity:
                guard let bound = connection.whisperId else {
                    await refuse(.notRegistered, "no valid session for this connection; register first", requestId: frame.requestId, on: connection)
                    return nil
                }
                whisperId = bound
            case .address(let limit):
                guard limits.take(limit, address: connection.remoteAddress) else {
                    await refuse(over: limit, retryAfterMs: nil, requestId: frame.requestId, on: connection)
                    return nil
                }
            case .identityBucket(let limit):
                // Listed after `identity` (`FrameRoute.acting`); without one the frame is
                // refused, never let past the bucket.
                guard let key = whisperId else {
                    await refuse(.notRegistered, "no valid session for this connection; register first", requestId: frame.requestId, on: connection)
                    return nil
                }
                if case .limited(let retry) = try await limits.limiter.take(limit, key: key, rules: limits.rules) {
                    await refuse(over: limit, retryAfterMs: retry, requestId: frame.requestId, on: connection)
                    return nil
                }
            }
        }
        return FrameRoute.Served(frame: frame, connection: connection, whisperId: whisperId, waitingSince: waitingSince, turn: turn)
    }

    /// Frames that cost nothing but the gateway's (and auth's) time: limited here, per
    /// socket and per address, since no other limit sees them.
    private func admitControl(on connection: ClientConnection) -> Bool {
        connection.takeControl() && limits.take(.controlPerAddress, address: connection.remoteAddress)
    }

    /// Answers a refused frame, unless the socket has had too many refusals (per socket
    /// or from its address): then it is closed with 4003 instead, and what it sends
    /// next is not read.
    func refuse(_ code: ErrorCode, _ message: String, requestId: String?, on connection: ClientConnection) async {
        guard connection.takeRefusal(), limits.take(.refusalsPerAddress, address: connection.remoteAddress) else {
            environment.metrics.recordError(code)
            if !connection.isClosing {
                connection.logger.warning("socket_refusals_exceeded")
                connection.close(code: CloseCode.tooManyRefusals, reason: "too many refused frames")
            }
            return
        }
        await reply(error: code, message, requestId: requestId, on: connection)
    }

    /// Refuses a frame over `limit` with the limit's words (`RATE_LIMITED`), counted
    /// against the socket like any refusal.
    func refuse(over limit: Limit, retryAfterMs: Int?, requestId: String?, on connection: ClientConnection) async {
        await refuse(.rateLimited, limit.refusal(retryAfterMs: retryAfterMs), requestId: requestId, on: connection)
    }

    /// A Whisperer's conversations, served from Postgres with the socket's logger.
    func conversations(_ served: FrameRoute.Served) -> LiveConversationDesk {
        LiveConversationDesk(postgres: environment.postgres, logger: served.connection.logger)
    }

    func reply(error code: ErrorCode, _ message: String, requestId: String?, on connection: ClientConnection) async {
        environment.metrics.recordError(code)
        connection.sendRaw(ServerFrameCodec.encodeError(code, message, requestId: requestId))
    }
}

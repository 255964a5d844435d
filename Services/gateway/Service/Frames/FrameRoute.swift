import WhisperShared

/// How the gateway serves one client frame type: who may send it, the limits it is
/// charged before any work, and its handler. `FrameRoute.route(for:)` is the one table
/// of them (`FrameRoutes.swift`); `FrameHandler` runs every frame through the same
/// stages: decode, control gate, sender, limits, serve.
struct FrameRoute: Sendable {
    /// Who may send the frame.
    enum Sender: Sendable, Equatable {
        /// Anyone: registration and `ping`.
        case anyone
        /// A socket with a live session for its identity (the frame's `sessionToken`):
        /// the frames the protocol calls privileged (`ClientFrameType.isPrivileged`).
        case session
        /// A socket opened with a listener device's cookie (live text's listeners).
        case listenerDevice
    }

    /// A limit charged before the handler runs, in the order the route lists them.
    /// Limits that ride in the frame's own work (the router stream's admission script,
    /// the leases of messages and receipts) are charged by the handler.
    enum Gate: Sendable {
        /// The socket's and its address's share of frames that cost only time
        /// (`GATEWAY_RATE_LIMIT_CONTROL_PER_SOCKET`, `_PER_ADDRESS`) before the session
        /// check, and the identity's (`_PER_IDENTITY`) after it.
        case control
        /// The socket acts for an identity (else `NOT_REGISTERED`); the handler gets it.
        case identity
        /// The address's share of one limit kept in this instance's memory
        /// (`Limit.routedPerAddress`, `.groupOpsPerAddress`).
        case address(Limit)
        /// The identity's bucket of one limit, in Redis.
        case identityBucket(Limit)
    }

    /// A frame that passed its sender and limit checks, as its handler gets it.
    struct Served: Sendable {
        let frame: InboundFrame
        let connection: ClientConnection
        /// The identity the socket acts for; set for routes with the `identity` gate.
        let whisperId: String?
        /// Since when the frame has waited for the gateway (`NIODeadline` uptime, ns; 0
        /// when it did not: `SocketInbox.nextTimed()`).
        let waitingSince: UInt64
        /// The frame's turn on its socket, when it may let the next frame go before it
        /// ends (`SocketTurns`).
        let turn: FrameTurn?

        /// Answers the frame with `payload`.
        func answer(_ payload: some ServerPayload) {
            connection.send(payload, requestId: frame.requestId)
        }
    }

    let type: ClientFrameType
    let sender: Sender
    let gates: [Gate]
    /// Refusals the handler throws (`WhisperError`) are answered as such and not counted
    /// against the socket: the client could not have known. Otherwise a thrown error is
    /// answered `INTERNAL_ERROR` and logged.
    let answersRefusals: Bool
    let serve: @Sendable (FrameHandler, Served) async throws -> Void

    var isControl: Bool { gates.contains { if case .control = $0 { true } else { false } } }

    /// A route whose handler takes the payload as its own type.
    static func open<P: ClientPayload>(
        _: P.Type, _ sender: Sender, _ gates: [Gate] = [], answersRefusals: Bool = false,
        _ serve: @escaping @Sendable (FrameHandler, P, Served) async throws -> Void
    ) -> FrameRoute {
        FrameRoute(type: P.frameType, sender: sender, gates: gates, answersRefusals: answersRefusals) { handler, served in
            guard let payload = served.frame.payload as? P else { throw FrameRouteMismatch(type: P.frameType) }
            try await serve(handler, payload, served)
        }
    }

    /// A route for a session's frame that acts for the socket's identity: the socket
    /// must act for one, and its address is charged for a routed frame, before `gates`.
    static func acting<P: ClientPayload>(
        _: P.Type, _ gates: [Gate] = [], answersRefusals: Bool = false,
        _ serve: @escaping @Sendable (FrameHandler, P, String, Served) async throws -> Void
    ) -> FrameRoute {
        open(P.self, .session, [.identity, .address(.routedPerAddress)] + gates, answersRefusals: answersRefusals) { handler, payload, served in
            guard let whisperId = served.whisperId else { throw FrameRouteMismatch(type: P.frameType) }
            try await serve(handler, payload, whisperId, served)
        }
    }
}

/// A route's payload type differs from the decoder's for its frame type (a table out of
/// step with the protocol; `FrameRouteTests` keeps them together).
struct FrameRouteMismatch: Error {
    let type: ClientFrameType
}

import WhisperShared

/// The frames another service answers: registration, session and token frames go to
/// auth, `get_turn_credentials` to turn-cred, each with the socket's context, and the
/// answer goes back to the socket as it is (docs/architecture.md, "Identity and
/// sessions").
struct ServiceForwarding: Sendable {
    let auth: ServiceClient
    /// turn-cred's internal port, when TURN is offered.
    let turnCred: ServiceClient?
    let binding: SessionBinding
    let instanceID: String

    /// Passes the frame to auth and its answer back.
    func toAuth(_ payload: some ClientPayload, _ served: FrameRoute.Served) async throws {
        served.connection.sendRaw(try await auth.forward(payload, requestId: served.frame.requestId, context: context(of: served.connection)))
    }

    /// `register_proof`: auth's answer, then the socket acts for the identity. The ack
    /// goes out first: claiming presence may close a concurrent socket of the same
    /// identity, whose close must not overtake its own ack; the socket's next frame finds
    /// it bound (frames are handled one at a time).
    func register(_ payload: RegisterProof, _ served: FrameRoute.Served) async throws {
        let connection = served.connection
        let answer = try await auth.forward(payload, requestId: served.frame.requestId, context: context(of: connection))
        let ack = try? ServerFrameCodec.decode(answer).payload(as: RegisterAck.self)
        connection.sendRaw(answer)
        if let ack {
            await binding.rebind(connection, to: ack.whisperId)
        }
    }

    /// `logout`: auth ends the session; the socket stops acting for the identity.
    func logout(_ payload: Logout, _ served: FrameRoute.Served) async throws {
        let connection = served.connection
        connection.forgetVerifiedSession()
        let answer = try await auth.forward(payload, requestId: served.frame.requestId, context: context(of: connection))
        if (try? ServerFrameCodec.decode(answer))?.type == .loggedOut {
            await binding.release(connection)
        }
        connection.sendRaw(answer)
    }

    /// `get_turn_credentials`, from turn-cred when this server offers TURN.
    func turnCredentials(_ payload: GetTurnCredentials, _ served: FrameRoute.Served) async throws {
        guard let turnCred else {
            throw FrameRefusal.counted(.forbidden, "get_turn_credentials is not available on this server (no TURN service configured)")
        }
        served.connection.sendRaw(try await turnCred.forward(payload, requestId: served.frame.requestId, context: context(of: served.connection)))
    }

    func context(of connection: ClientConnection) -> ConnectionContext {
        ConnectionContext(gateway: instanceID, connId: connection.id, remoteAddress: connection.remoteAddress, whisperId: connection.whisperId)
    }
}

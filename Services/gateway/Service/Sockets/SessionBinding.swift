import WhisperMessaging
import WhisperShared

/// Which identity a socket acts for, and the identity's presence that goes with it: a
/// socket is bound by its first live session (`authorize`) or by a registration
/// (`rebind`), claims the identity's presence (closing an older socket elsewhere), and
/// gives both up on logout or close (`release`). docs/architecture.md, "Identity and
/// sessions" and "Presence".
struct SessionBinding: Sendable {
    let sessions: SessionStore
    let presence: PresenceStore
    let recentBans: RecentBans
    let watching: PresenceDesk
    /// Which socket here holds each identity's presence (`SendDesk`'s early delivery).
    let connections: ConnectionRegistry
    let ptt: PTTDesk
    let redis: RedisClient
    let instanceID: String

    /// A privileged frame may act only with a live session, and only for the identity
    /// the socket acts for. A socket's first valid session binds it (a reconnect).
    func authorize(_ token: String, on connection: ClientConnection) async throws -> Bool {
        let trust = connection.trusts(token)
        if trust.trusted, let whisperId = connection.whisperId {
            if trust.renew {
                let sessions = sessions
                Task {
                    var live: Bool?
                    do {
                        live = try await sessions.lookup(token)?.whisperId == whisperId
                    } catch {
                        live = nil
                    }
                    connection.renewed(token, live: live)
                }
            }
            return true
        }
        guard let record = try await sessions.lookup(token) else { return false }
        let (accepted, isNew) = connection.bind(to: record.whisperId)
        guard accepted else {
            connection.logger.info("session_for_other_identity")
            return false
        }
        // Bound first, checked second: a ban heard in between closes this socket
        // (`ControlChannel`), one heard before is seen here.
        if recentBans.contains(record.whisperId) {
            _ = connection.unbind()
            return false
        }
        if isNew {
            await claimPresence(record.whisperId, for: connection)
        }
        connection.rememberVerified(token)
        return true
    }

    /// After a registration on this socket: act for the new identity.
    func rebind(_ connection: ClientConnection, to whisperId: String) async {
        if let previous = connection.unbind(), previous != whisperId {
            await letGo(previous, by: connection)
        }
        _ = connection.bind(to: whisperId)
        await claimPresence(whisperId, for: connection)
    }

    /// When the socket logs out or closes: it no longer stands for its identity, its
    /// presence subscriptions end, and if it was the identity's live socket, the
    /// identity's watchers are told it went offline.
    func release(_ connection: ClientConnection) async {
        guard let whisperId = connection.unbind() else { return }
        await letGo(whisperId, by: connection)
    }

    private func letGo(_ whisperId: String, by connection: ClientConnection) async {
        connections.releasedPresence(whisperId, by: connection)
        await watching.unsubscribeAll(whisperId, on: connection)
        if (try? await presence.clear(whisperId, ifOwnedBy: PresenceRecord(gateway: instanceID, connId: connection.id))) == true {
            await announce(whisperId, .offline, on: connection)
        }
    }

    /// Records this socket as the identity's live one. An older socket of the same
    /// session (a reconnect on a new network) is closed.
    private func claimPresence(_ whisperId: String, for connection: ClientConnection) async {
        let mine = PresenceRecord(gateway: instanceID, connId: connection.id)
        do {
            let previous = try await presence.set(whisperId, to: mine)
            // Known here at once for messages written while they are stored (`SendDesk`).
            if connection.whisperId == whisperId { connections.heldPresence(whisperId, by: connection) }
            if let previous {
                if previous != mine {
                    try await GatewayCommand(kind: .supersede, connId: previous.connId).publish(to: previous.gateway, on: redis)
                }
            } else {
                await announce(whisperId, .online, on: connection)
            }
        } catch {
            connection.logger.warning("presence_update_failed", metadata: ["error": "\(error)"])
        }
        // A member connected: its push-to-talk channels have not lapsed.
        ptt.channels.memberConnected(whisperId)
    }

    private func announce(_ whisperId: String, _ status: PresenceStatus, on connection: ClientConnection) async {
        do {
            try await watching.announce(whisperId, status)
        } catch {
            connection.logger.warning("presence_announce_failed", metadata: ["error": "\(error)"])
        }
    }
}

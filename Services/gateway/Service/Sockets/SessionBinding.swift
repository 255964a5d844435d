import WhisperMessaging
import WhisperShared

/// Which identity a socket acts for: a socket is bound by its first live session
/// (`authorize`) or by a registration (`rebind`), and unbound on logout or close
/// (`release`); its presence goes with the binding (`PresenceClaims`).
/// docs/architecture.md, "Identity and sessions".
struct SessionBinding: Sendable {
    let sessions: SessionStore
    let recentBans: RecentBans
    let presence: PresenceClaims

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
            await presence.claim(record.whisperId, for: connection)
        }
        connection.rememberVerified(token)
        return true
    }

    /// After a registration on this socket: act for the new identity.
    func rebind(_ connection: ClientConnection, to whisperId: String) async {
        if let previous = connection.unbind(), previous != whisperId {
            await presence.letGo(previous, by: connection)
        }
        _ = connection.bind(to: whisperId)
        await presence.claim(whisperId, for: connection)
    }

    /// When the socket logs out or closes: it no longer stands for its identity, its
    /// presence subscriptions end, and if it was the identity's live socket, the
    /// identity's watchers are told it went offline.
    func release(_ connection: ClientConnection) async {
        guard let whisperId = connection.unbind() else { return }
        await presence.letGo(whisperId, by: connection)
    }
}

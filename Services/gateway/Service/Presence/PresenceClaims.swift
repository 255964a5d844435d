import WhisperMessaging
import WhisperShared

/// An identity's presence as its sockets take it and give it up: the socket bound to it
/// claims the record (closing an older socket elsewhere, telling watchers it came
/// online), and lets go of it on logout or close (watchers told it went offline, if it
/// still held the record). docs/architecture.md, "Presence".
struct PresenceClaims: Sendable {
    let presence: PresenceStore
    let watching: PresenceDesk
    /// Which socket here holds each identity's presence (`SendDesk`'s early delivery).
    let connections: ConnectionRegistry
    let ptt: PTTDesk
    let redis: RedisClient
    let instanceID: String

    /// Records this socket as the identity's live one. An older socket of the same
    /// session (a reconnect on a new network) is closed.
    func claim(_ whisperId: String, for connection: ClientConnection) async {
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

    /// The socket no longer stands for `whisperId`: its presence subscriptions end, and
    /// if it held the identity's record, watchers are told it went offline.
    func letGo(_ whisperId: String, by connection: ClientConnection) async {
        connections.releasedPresence(whisperId, by: connection)
        await watching.unsubscribeAll(whisperId, on: connection)
        if (try? await presence.clear(whisperId, ifOwnedBy: PresenceRecord(gateway: instanceID, connId: connection.id))) == true {
            await announce(whisperId, .offline, on: connection)
        }
    }

    private func announce(_ whisperId: String, _ status: PresenceStatus, on connection: ClientConnection) async {
        do {
            try await watching.announce(whisperId, status)
        } catch {
            connection.logger.warning("presence_announce_failed", metadata: ["error": "\(error)"])
        }
    }
}

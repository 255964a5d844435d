import Foundation
import Hummingbird
import Logging
import WhisperMessaging
import WhisperShared

/// `account_delete` and its HTTP twin `POST /account/delete` at the gateway: checked,
/// limited and prepared here, then carried out by a router (docs/protocol.md section 4).
struct AccountDeletionDesk: Sendable {
    let environment: ServiceEnvironment
    let sessions: SessionStore
    let limits: FrameLimits
    let routerStream: RouterStreamDesk
    let live: LiveRelay
    let ptt: PTTDesk

    var instanceID: String { environment.settings.instanceID }

    /// `account_delete` (docs/protocol.md section 4): checked and prepared here
    /// (`prepareDeletion`), then the router takes the groups and the rest (`AccountDesk`)
    /// and answers `account_deleted` through this instance's channel.
    func serve(_ request: AccountDelete, whisperId: String, _ served: FrameRoute.Served) async throws {
        try await prepareDeletion(
            request, whisperId: whisperId, address: served.connection.remoteAddress, by: accountDeletion(logger: served.connection.logger)
        )
        try await routerStream.enqueue(.accountDelete, served, whisperId: whisperId, charging: .groupOpsPerIdentity)
    }

    /// `POST /account/delete`, the HTTP twin: the session in `Authorization: Bearer`, the
    /// signed fields as the body, from `address` (the client's, `TrustedProxies.clientKey`).
    /// The router's answer goes to no socket: this waits until the deletion is recorded
    /// (at most `wait`), then answers as the frame would.
    func serve(over request: Request, address: String, wait: Duration = .seconds(20)) async throws -> Response {
        let session = try await sessions.authenticate(request)
        let token = SessionStore.bearerToken(of: request) ?? ""
        let body = try await request.body.collect(upTo: 4_096)
        guard let object = try? JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any],
              Set(object.keys).isSubset(of: AccountDeleteFields.fieldNames),
              let fields = try? JSONDecoder().decode(AccountDeleteFields.self, from: Data(buffer: body)) else {
            throw WhisperHTTPError(.invalidPayload, "the body must be {whisperId, timestamp, signature}")
        }
        do {
            try fields.validate()
        } catch {
            throw WhisperHTTPError(.invalidPayload, "\(error.field) \(error.rule)")
        }
        let whisperId = session.whisperId
        let payload = AccountDelete(sessionToken: token, fields)
        let deletion = accountDeletion(logger: environment.logger)
        do {
            try await prepareDeletion(payload, whisperId: whisperId, address: address, by: deletion)
            let entry = RouterStream.Entry(
                gateway: instanceID, connId: "", whisperId: whisperId, type: .accountDelete, requestId: nil,
                payload: try RouterStream.storedPayload(payload), receivedAt: Clock.millisecondsNow()
            )
            switch try await routerStream.add(entry, charging: .groupOpsPerIdentity, isMessage: false) {
            case .added: break
            case .limited(let retry): throw WhisperError(.rateLimited, Limit.groupOpsPerIdentity.refusal(retryAfterMs: retry))
            case .busy: throw WhisperError(.rateLimited, limits.busyRefusal)
            }
        } catch let refusal as WhisperError {
            throw WhisperHTTPError(refusal.code, refusal.message)
        }
        let deadline = ContinuousClock.now + wait
        while ContinuousClock.now < deadline {
            if let deletedAt = try await deletion.deletedAt(whisperId) {
                let answer = try JSONEncoder().encode(AccountDeleted(whisperId: whisperId, deletedAt: deletedAt))
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(data: answer)))
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw WhisperHTTPError(.internalError, "the deletion is under way but not done yet; send the request again")
    }

    /// The attempt charged to its address and its identity (`Limit.deletionsPerAddress`,
    /// `.deletionsPerIdentity`, every gateway together), the request held to its rule (the
    /// session's own identity, signed by its key at about the server's time), then the
    /// identity's live conversations and push-to-talk channels let go, as their owner
    /// deleting them or a member leaving would (listeners and members are told). A request
    /// that failed half-way is sent again: every step finds what is left.
    private func prepareDeletion(_ request: AccountDelete, whisperId: String, address: String, by deletion: AccountDeletion) async throws {
        try await limits.limiter.charge(.deletionsPerAddress, key: RateLimiter.addressKey(address), rules: limits.rules)
        try await limits.limiter.charge(.deletionsPerIdentity, key: whisperId, rules: limits.rules)
        try await deletion.verify(request.fields, session: whisperId)
        let logger = deletion.logger
        let conversations = LiveConversationDesk(postgres: environment.postgres, logger: logger)
        for conversation in try await conversations.list(owner: whisperId).conversations {
            do {
                _ = try await conversations.delete(
                    LiveConversationDelete(sessionToken: request.sessionToken, LiveConversationDeleteFields(conversationId: conversation.conversationId)),
                    owner: whisperId, releasing: live
                )
            } catch let refusal as WhisperError where refusal.code == .notFound {
                continue  // deleted meanwhile
            }
        }
        for channel in try await ptt.channels.list(member: whisperId).channels {
            do {
                if channel.ownerId == whisperId {
                    _ = try await ptt.channels.delete(PTTChannelDelete(sessionToken: request.sessionToken, .init(channelId: channel.channelId)), owner: whisperId)
                } else {
                    _ = try await ptt.channels.leave(PTTChannelLeave(sessionToken: request.sessionToken, .init(channelId: channel.channelId)), member: whisperId)
                }
            } catch let refusal as WhisperError where refusal.code == .notFound {
                continue  // deleted or left meanwhile
            }
        }
    }

    private func accountDeletion(logger: Logger) -> AccountDeletion {
        AccountDeletion(postgres: environment.postgres, redis: environment.redis, logger: logger)
    }
}

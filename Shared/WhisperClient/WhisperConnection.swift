import Foundation
import Logging
import NIOCore
import HTTPTypes
import NIOWebSocket
import WSClient
import WhisperProtocol

/// Why a request over the WebSocket did not get its answer.
public enum WhisperClientError: Error, Equatable, Sendable {
    /// The server refused the frame with a frozen code.
    case refused(ErrorCode, String)
    /// The socket closed first; `code` is the WebSocket close code, if one came.
    case closed(code: UInt16?)
    /// No answer within the request's timeout (the frame may still have been handled:
    /// resend with the same `requestId` or `messageId`, which are idempotent).
    case timedOut
    /// `connect()` has not succeeded yet.
    case notConnected
    /// An answer of a type the request does not expect (its frame type).
    case unexpectedReply(String)
    /// Listening to live text needs a listener device (`WhisperSession.Configuration.listenerDevice`).
    case notListenerDevice
    /// The session only listens (`WhisperSession(listeningWith:)`): it has no identity to act as.
    case noIdentity
}

/// One WebSocket to a Whisper gateway: requests matched to answers by `requestId`,
/// everything else (messages, revocations, reconnect notices) on `events`.
public actor WhisperConnection {
    public let url: String
    /// Frames the server sends unasked, in order; finishes when the socket closes.
    public nonisolated let events: AsyncStream<ServerFrame>
    private let eventContinuation: AsyncStream<ServerFrame>.Continuation
    private var outbound: WebSocketOutboundWriter?
    /// Requests waiting for their answer, by requestId.
    private var waiting: [String: PendingRequest] = [:]
    /// Ends requests whose time is up; one per socket (not a timer per request).
    private var sweeper: Task<Void, Never>?

    private enum PendingRequest {
        /// Sent; the caller is about to wait.
        case sent(deadline: ContinuousClock.Instant)
        /// The answer came before the caller started waiting.
        case answered(ServerFrame)
        case awaiting(CheckedContinuation<ServerFrame, any Error>, deadline: ContinuousClock.Instant)
    }
    private var connectWaiters: [CheckedContinuation<Void, any Error>] = []
    /// `close()` calls waiting for the socket to count as closed.
    private var closeWaiters: [CheckedContinuation<Void, Never>] = []
    private var task: Task<Void, Never>?
    private var closedCode: UInt16??
    private let logger: Logger
    /// A listener device's cookie value (live text), sent with the upgrade.
    private let listenerDevice: ListenerDevice?

    /// The identity this socket acts for, after `register` or `resume`.
    public private(set) var whisperId: String?
    /// The session in use after `register`/`refreshSession` (keep it in the keychain).
    public private(set) var sessionToken: String?
    /// When the session ends (ms since 1970); refresh when less than a day is left.
    public private(set) var sessionExpiresAt: Int64?

    /// A connection to `url` (`ws://…/ws` or `wss://…/ws`); nothing is sent until `connect()`.
    /// `listenerDevice`: listen to live text as that device (``ListenerDevice/issue(websocketURL:)``).
    public init(url: String, listenerDevice: ListenerDevice? = nil, logger: Logger = Logger(label: "whisper-client")) {
        self.url = url
        self.listenerDevice = listenerDevice
        self.logger = logger
        (events, eventContinuation) = AsyncStream.makeStream()
    }

    /// Opens the socket; returns once it is open.
    public func connect() async throws {
        guard task == nil else { return }
        let url = self.url
        let logger = self.logger
        var headers = HTTPFields()
        if let listenerDevice { headers[.cookie] = "\(ListenerDevice.cookieName)=\(listenerDevice.cookie)" }
        task = Task { [headers] in
            do {
                let close = try await WebSocketClient.connect(
                    url: url,
                    configuration: .init(maxFrameSize: 1 << 22, additionalHeaders: headers),
                    logger: logger
                ) { inbound, outbound, _ in
                    await self.opened(outbound)
                    for try await message in inbound.messages(maxSize: 1 << 22) {
                        guard case .text(let text) = message else { continue }
                        await self.received(text)
                    }
                }
                self.closed(code: close.map { Self.code($0.closeCode) }, error: nil)
            } catch {
                self.closed(code: nil, error: error)
            }
        }
        try await withCheckedThrowingContinuation { continuation in
            if outbound != nil {
                continuation.resume()
            } else if closedCode != nil {
                continuation.resume(throwing: WhisperClientError.closed(code: closedCode ?? nil))
            } else {
                connectWaiters.append(continuation)
            }
        }
    }

    /// Closes the socket (normal closure), waiting up to `grace` for the server's side of
    /// the closing handshake; a socket that does not answer by then (a dead network) is
    /// dropped. A socket still connecting gives the attempt up (`connect()` throws
    /// ``WhisperClientError/closed(code:)``). Returns once the socket counts as closed.
    public func close(grace: Duration = .seconds(2)) async {
        guard closedCode == nil, let task else { return }
        guard outbound != nil else {
            task.cancel()
            closed(code: nil, error: nil)
            return
        }
        let deadline = Task {
            try await Task.sleep(for: grace)
            task.cancel()
            self.closed(code: nil, error: nil)
        }
        try? await outbound?.close(.normalClosure, reason: nil)
        if closedCode == nil {
            await withCheckedContinuation { closeWaiters.append($0) }
        }
        deadline.cancel()
    }

    /// The close code once the socket has closed (nil inside when none was sent).
    public var closeCode: UInt16?? { closedCode }

    /// Sends a frame and waits for the frame that answers it.
    /// A resend after a lost answer should reuse the `requestId` (group_create names
    /// the same group for the same one).
    public func request<P: ClientPayload>(_ payload: P, requestId: String = RandomID.uuid(), timeout: Duration = .seconds(10)) async throws -> ServerFrame {
        guard let outbound else { throw closedCode != nil ? WhisperClientError.closed(code: closedCode ?? nil) : .notConnected }
        let text = String(decoding: ClientFrameCodec.encode(payload, requestId: requestId), as: UTF8.self)
        // Registered before the write: the answer may come while the write is awaited.
        waiting[requestId] = .sent(deadline: .now + timeout)
        startSweeper()
        do {
            try await outbound.write(.text(text))
        } catch {
            waiting[requestId] = nil
            throw WhisperClientError.closed(code: nil)
        }
        let frame = try await withCheckedThrowingContinuation { continuation in
            switch waiting[requestId] {
            case .answered(let frame):
                waiting[requestId] = nil
                continuation.resume(returning: frame)
            case .sent(let deadline):
                waiting[requestId] = .awaiting(continuation, deadline: deadline)
            case .awaiting, nil:
                // Timed out or closed while the write was awaited.
                waiting[requestId] = nil
                continuation.resume(throwing: closedCode != nil ? WhisperClientError.closed(code: closedCode ?? nil) : WhisperClientError.timedOut)
            }
        }
        if let error = frame.payload(as: ErrorPayload.self) {
            throw WhisperClientError.refused(error.code, error.message)
        }
        return frame
    }

    /// Whether the sweeper runs (it does only while requests wait).
    var isSweeping: Bool { sweeper != nil }

    /// Runs while requests wait: an idle socket wakes its app only for its pings.
    private func startSweeper() {
        guard sweeper == nil else { return }
        sweeper = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(250))
                guard let self, await self.expireOverdue() else { return }
            }
        }
    }

    /// Fails requests past their deadline; false once the socket is closed or nothing
    /// waits any more (the sweeper then ends, and the next request starts another).
    private func expireOverdue() -> Bool {
        guard closedCode == nil else { return false }
        guard !waiting.isEmpty else {
            sweeper = nil
            return false
        }
        let now = ContinuousClock.now
        for (requestId, pending) in waiting {
            switch pending {
            case .awaiting(let continuation, let deadline) where deadline <= now:
                waiting[requestId] = nil
                continuation.resume(throwing: WhisperClientError.timedOut)
            case .sent(let deadline) where deadline <= now:
                waiting[requestId] = nil
            default:
                continue
            }
        }
        return true
    }

    /// Creates or recovers the identity of `keys` on this socket (docs/protocol.md section 4).
    @discardableResult
    public func register(
        keys: WhisperKeys, deviceId: String, platform: Platform, whisperId: String? = nil,
        pushToken: String? = nil, voipToken: String? = nil
    ) async throws -> RegisterAck {
        let version = WhisperKeys.cryptoVersion
        let challengeFrame = try await request(RegisterBegin(cryptoVersion: version, .init(whisperId: whisperId, deviceId: deviceId, platform: platform)))
        guard let challenge = challengeFrame.payload(as: RegisterChallenge.self),
              let challengeBytes = Data(base64Encoded: challenge.challenge) else {
            throw WhisperClientError.unexpectedReply(challengeFrame.type.rawValue)
        }
        // The domain-separated proof (cryptoVersion 2): the key never signs a bare challenge.
        let proof = RegisterProof(
            cryptoVersion: version, .init(challengeId: challenge.challengeId, deviceId: deviceId, platform: platform, whisperId: whisperId,
            encPublicKey: Data(keys.encPublicKey).base64EncodedString(),
            signPublicKey: Data(keys.signPublicKey).base64EncodedString(),
            signature: Data(keys.proveChallenge(Array(challengeBytes), cryptoVersion: version)).base64EncodedString(),
            pushToken: pushToken, voipToken: voipToken)
        )
        let ackFrame = try await request(proof)
        guard let ack = ackFrame.payload(as: RegisterAck.self) else { throw WhisperClientError.unexpectedReply(ackFrame.type.rawValue) }
        self.whisperId = ack.whisperId
        sessionToken = ack.sessionToken
        sessionExpiresAt = ack.sessionExpiresAt
        return ack
    }

    /// Swaps the session token for a new one (send when less than 24 h remain).
    @discardableResult
    public func refreshSession() async throws -> SessionRefreshed {
        let frame = try await request(SessionRefresh(sessionToken: try token()))
        guard let refreshed = frame.payload(as: SessionRefreshed.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        sessionToken = refreshed.sessionToken
        sessionExpiresAt = refreshed.sessionExpiresAt
        return refreshed
    }

    /// Ends the session on the server.
    public func logout() async throws {
        _ = try await request(Logout(sessionToken: try token()))
        sessionToken = nil
        sessionExpiresAt = nil
    }

    /// Deletes the identity for good (`account_delete`, signed with `keys`, so that a
    /// session token alone cannot): its messages, groups, live conversations, channels,
    /// backup and attachments go, and its Whisper ID is never given out again. The server
    /// closes the socket after `account_deleted`.
    @discardableResult
    public func deleteAccount(keys: WhisperKeys, timeout: Duration = .seconds(30)) async throws -> AccountDeleted {
        let frame = try await request(AccountDelete(sessionToken: try token(), keys.accountDeletion(whisperId: try ownId())), timeout: timeout)
        guard let deleted = frame.payload(as: AccountDeleted.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        sessionToken = nil
        sessionExpiresAt = nil
        return deleted
    }

    /// Sets, keeps or clears the device's push and VoIP tokens (after the OS rotates one).
    public func updateTokens(pushToken: TokenUpdate, voipToken: TokenUpdate = .unchanged) async throws {
        _ = try await request(UpdateTokens(sessionToken: try token(), .init(pushToken: pushToken, voipToken: voipToken)))
    }

    /// Sends a message; returns when the server has stored it (`message_accepted`).
    @discardableResult
    public func send(_ message: SendMessage, timeout: Duration = .seconds(10)) async throws -> MessageAccepted {
        let frame = try await request(message, timeout: timeout)
        guard let accepted = frame.payload(as: MessageAccepted.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return accepted
    }

    /// Acknowledges a received message to its sender (and, when delivered, clears it from the queue).
    public func acknowledge(_ message: MessageReceived, status: ReceiptStatus = .delivered) async throws {
        guard let whisperId else { throw WhisperClientError.refused(.notRegistered, "no session; register first") }
        let receipt = DeliveryReceipt(
            protocolVersion: 1, cryptoVersion: 1, sessionToken: try token(), .init(messageId: message.messageId,
            from: whisperId, to: message.from, status: status, timestamp: Clock.millisecondsNow())
        )
        try await sendOnly(receipt)
    }

    /// One page of the pending queue.
    public func fetchPending(cursor: String? = nil, limit: Int? = nil) async throws -> PendingMessages {
        let frame = try await request(FetchPending(protocolVersion: 1, cryptoVersion: 1, sessionToken: try token(), .init(cursor: cursor, limit: limit)))
        guard let page = frame.payload(as: PendingMessages.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return page
    }

    /// Creates a group with the given members (the caller becomes its owner). Send it
    /// again after a lost answer: the `requestId` of `request` makes a resend name the same group.
    public func createGroup(title: String, memberIds: [String]) async throws -> GroupCreated {
        let frame = try await request(GroupCreate(sessionToken: try token(), .init(title: title, memberIds: memberIds)))
        guard let created = frame.payload(as: GroupCreated.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return created
    }

    /// Changes a group: members added or removed (owner only), the title, or leaving it
    /// (`removeMembers` with one's own ID).
    public func updateGroup(_ groupId: String, add: [String]? = nil, remove: [String]? = nil, title: String? = nil) async throws -> GroupUpdated {
        let frame = try await request(GroupUpdate(sessionToken: try token(), .init(groupId: groupId, addMembers: add, removeMembers: remove, title: title)))
        guard let updated = frame.payload(as: GroupUpdated.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return updated
    }

    /// The open invitations to groups (from identities that are not direct peers; they
    /// also arrive live as `group_invited`), newest first.
    public func groupInvitations() async throws -> [GroupInvitation] {
        let frame = try await request(GroupInvitationsList(sessionToken: try token()))
        guard let list = frame.payload(as: GroupInvitations.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return list.invitations
    }

    /// Accepts an invitation: the caller becomes a member (the answer is the group's state).
    public func acceptGroupInvitation(_ groupId: String) async throws -> GroupUpdated {
        try await updateGroup(groupId, add: [try ownId()])
    }

    /// Declines an invitation; the group never hears of it.
    public func declineGroupInvitation(_ groupId: String) async throws {
        _ = try await updateGroup(groupId, remove: [try ownId()])
    }

    /// Sends one member's copy of a group message (`MessageCrypto.makeGroupCopies`);
    /// returns when the server has stored it for that member.
    @discardableResult
    public func send(_ copy: GroupSendMessage, timeout: Duration = .seconds(10)) async throws -> MessageAccepted {
        let frame = try await request(copy, timeout: timeout)
        guard let accepted = frame.payload(as: MessageAccepted.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return accepted
    }

    /// Sends every copy of a group message, all at once; each member's outcome (a
    /// refused copy does not stop the others; resend the failed ones, it is idempotent).
    public func sendGroup(_ copies: [GroupSendMessage], timeout: Duration = .seconds(10)) async -> [String: Result<MessageAccepted, any Error>] {
        await withTaskGroup(of: (String, Result<MessageAccepted, any Error>).self) { group in
            for copy in copies {
                group.addTask {
                    do {
                        return (copy.to, .success(try await self.send(copy, timeout: timeout)))
                    } catch {
                        return (copy.to, .failure(error))
                    }
                }
            }
            var outcomes: [String: Result<MessageAccepted, any Error>] = [:]
            for await (member, outcome) in group { outcomes[member] = outcome }
            return outcomes
        }
    }

    /// Watches the presence of direct peers (replacing the previous list on this socket);
    /// returns their status now. `presence` events follow as they come and go. IDs that
    /// are not direct peers are left out of the answer and not watched.
    public func subscribePresence(_ whisperIds: [String]) async throws -> PresenceSnapshot {
        let frame = try await request(PresenceSubscribe(sessionToken: try token(), .init(whisperIds: whisperIds)))
        guard let snapshot = frame.payload(as: PresenceSnapshot.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return snapshot
    }

    /// Tells a direct peer that this user is (or stopped) typing. The server relays at
    /// most one a 2 seconds per peer and answers nothing; a call more often is harmless.
    public func sendTyping(to peer: String, isTyping: Bool) async throws {
        try await sendOnly(Typing(sessionToken: try token(), .init(to: peer, isTyping: isTyping)))
    }

    /// Reports an identity to the operators (`report_user`), naming up to 20 of its
    /// messages; a repeat while the report is open adds to it and answers the same ID.
    @discardableResult
    public func report(
        _ whisperId: String, reason: ReportReason, details: String? = nil, messageIds: [String]? = nil
    ) async throws -> ReportAccepted {
        let frame = try await request(ReportUser(sessionToken: try token(), .init(whisperId: whisperId, reason: reason, details: details, messageIds: messageIds)))
        guard let accepted = frame.payload(as: ReportAccepted.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return accepted
    }

    /// Sends a frame that gets no answer (receipts, typing).
    public func sendOnly<P: ClientPayload>(_ payload: P) async throws {
        guard let outbound else { throw WhisperClientError.notConnected }
        try await outbound.write(.text(String(decoding: ClientFrameCodec.encode(payload), as: UTF8.self)))
    }

    /// The server's clock, in milliseconds.
    public func ping() async throws -> Int64 {
        let frame = try await request(Ping())
        guard let pong = frame.payload(as: Pong.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return pong.serverTime
    }

    /// Uses a session obtained earlier (after an app restart, on a new socket).
    public func resume(whisperId: String, sessionToken: String) {
        self.whisperId = whisperId
        self.sessionToken = sessionToken
    }

    func token() throws -> String {
        guard let sessionToken else { throw WhisperClientError.refused(.notRegistered, "no session; register first") }
        return sessionToken
    }

    func ownId() throws -> String {
        guard let whisperId else { throw WhisperClientError.refused(.notRegistered, "no session; register first") }
        return whisperId
    }

    // MARK: - Socket events

    private func opened(_ writer: WebSocketOutboundWriter) async {
        // Given up while it was connecting: closed at once.
        guard closedCode == nil else {
            try? await writer.close(.normalClosure, reason: nil)
            return
        }
        outbound = writer
        connectWaiters.forEach { $0.resume() }
        connectWaiters.removeAll()
    }

    private func received(_ text: String) {
        guard let frame = try? ServerFrameCodec.decode(Array(text.utf8)) else {
            logger.warning("unreadable_frame", metadata: ["sizeBytes": "\(text.utf8.count)"])
            return
        }
        switch frame.requestId.flatMap({ waiting[$0] }) {
        case .awaiting(let continuation, _):
            waiting[frame.requestId!] = nil
            continuation.resume(returning: frame)
        case .sent:
            waiting[frame.requestId!] = .answered(frame)
        case .answered, nil:
            eventContinuation.yield(frame)
        }
    }

    private func closed(code: UInt16?, error: (any Error)?) {
        // Once: a socket given up counts as closed when its task ends later.
        guard closedCode == nil else { return }
        closedCode = .some(code)
        closeWaiters.forEach { $0.resume() }
        closeWaiters.removeAll()
        outbound = nil
        for case .awaiting(let continuation, _) in waiting.values {
            continuation.resume(throwing: WhisperClientError.closed(code: code))
        }
        waiting.removeAll()
        sweeper?.cancel()
        sweeper = nil
        connectWaiters.forEach { $0.resume(throwing: error ?? WhisperClientError.closed(code: code)) }
        connectWaiters.removeAll()
        eventContinuation.finish()
    }

    private static func code(_ code: WebSocketErrorCode) -> UInt16 {
        switch code {
        case .normalClosure: 1000
        case .goingAway: 1001
        case .protocolError: 1002
        case .unacceptableData: 1003
        case .dataInconsistentWithMessage: 1007
        case .policyViolation: 1008
        case .messageTooLarge: 1009
        case .missingExtension: 1010
        case .unexpectedServerError: 1011
        case .unknown(let value): value
        }
    }
}

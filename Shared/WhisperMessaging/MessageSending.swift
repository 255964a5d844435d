import NIOCore
import WhisperShared

/// Serves one `send_message` (a 1:1 message, or one copy of a group message) wherever it
/// is read: at the sender's gateway (`SendDesk`) or at a router (`MessageRouter`). The
/// steps: the message's checks, the store script (which answers for the sender and says
/// where the recipient is), then the sender's answer, the recipient's delivery and a
/// wake-up. docs/architecture.md, "The life of a message".
public struct MessageSending: Sendable {
    public let checks: MessageChecks
    public let attachments: AttachmentRecipients
    public let pending: PendingQueue
    public let redis: RedisClient
    public let pairLimit: RateLimitRule
    public let metrics: RoutingMetrics
    /// Which senders are their recipients' direct peers (a 1:1 message from anyone else
    /// counts against the strangers' share of the queue), shared with what else on the
    /// instance learns of an exchange (a gateway's deliveries: `PeerMemory.heard`).
    public let peers: PeerMemory

    public init(
        checks: MessageChecks, attachments: AttachmentRecipients, pending: PendingQueue, redis: RedisClient, pairLimit: RateLimitRule,
        metrics: RoutingMetrics, peers: PeerMemory = PeerMemory()
    ) {
        self.peers = peers
        self.checks = checks
        self.attachments = attachments
        self.pending = pending
        self.redis = redis
        self.pairLimit = pairLimit
        self.metrics = metrics
    }

    /// The sender's side of one message.
    public struct Sender: Sendable {
        /// The session's identity (whose own bucket was charged already).
        public var whisperId: String
        public var requestId: String?
        /// When the sender's gateway read the frame (ms), for the routing latency.
        public var receivedAt: Int64
        /// The message's trace, to continue at the recipient's gateway.
        public var traceparent: String?
        /// Where the message came from, carried to the recipient's gateway for its
        /// receipt (`DeliveryOrigin`); nil when the receipt is to be looked up.
        public var origin: DeliveryOrigin?

        public init(whisperId: String, requestId: String?, receivedAt: Int64, traceparent: String?, origin: DeliveryOrigin?) {
            self.whisperId = whisperId
            self.requestId = requestId
            self.receivedAt = receivedAt
            self.traceparent = traceparent
            self.origin = origin
        }
    }

    /// Where `send` runs.
    public protocol Caller: Sendable {
        /// Tells the sender its message is stored (`frame`, its `message_accepted`):
        /// written to its socket here (nil), or a command to publish with the delivery.
        func accept(_ frame: [UInt8]) -> RedisCommand?
        /// Writes `frame` (`message_received`) when `socket` is on this instance: true
        /// when written, false when that socket has gone; nil when it is elsewhere.
        func deliverHere(_ frame: [UInt8], to socket: PresenceRecord, message: Payload<SendMessageFields>, sender: Sender) -> Bool?
        /// Work to send in the store's write, and what to do with its replies (nil: the
        /// write failed).
        func alongside() -> (commands: [RedisCommand], returned: @Sendable ([RESPValue]?) -> Void)
        /// Writes `frame` (`message_received`) to the recipient's socket before the store's
        /// reply, when that socket is on this instance (known without a round trip) and
        /// the sender is the recipient's direct peer: the socket written, and the seat of
        /// its `delivered` receipt in the store, or nil when the message waits for its
        /// store. Each one written is `settle`d once the sender has been told the store's
        /// answer.
        func deliverEarly(_ frame: () -> [UInt8], message: Payload<SendMessageFields>, sender: Sender) -> EarlyDelivery?
        /// What the store did with a message delivered early (true: it is stored, now or
        /// before; `receiptRecorded`: with its `delivered` receipt, which the sender was
        /// given after `message_accepted`), once the sender's socket was given
        /// `message_accepted` or the refusal.
        func settle(_ message: Payload<SendMessageFields>, stored: Bool, receiptRecorded: Bool)
        /// The store of a message delivered early is written to Redis, behind everything
        /// this client wrote before it and ahead of anything it writes next: the caller may
        /// go on with its next message while the store's reply is awaited (only when the
        /// write went out without waiting for anything first: one connection, the script
        /// known). Nothing was delivered after the store for it, so no order is at stake.
        func storeWritten()
        /// How long the store of a message delivered early may wait for other writes to
        /// share its trip to Redis, and so Redis's fsync (group commit): only its sender's
        /// `message_accepted` waits for it, the recipient already has the message.
        var storeMayWait: Duration { get }
        /// Whether `send` waits for what it publishes before it returns. A router must (it
        /// acknowledges the stream entry next, on another connection); a gateway need not:
        /// the publish is written before anything the socket sends next, on the same
        /// connection, so its order holds, and the socket's next frame does not wait a
        /// round trip for it. The push job for a recipient whose gateway turned out to be
        /// gone then follows from the reply.
        var waitsForPublishes: Bool { get }
    }

    /// A message written to its recipient before its store answered: where, and the seat
    /// its `delivered` receipt may take in the store while the write waits (nil: none).
    public struct EarlyDelivery: Sendable {
        public var socket: PresenceRecord
        public var ride: ReceiptRide?

        public init(socket: PresenceRecord, ride: ReceiptRide?) {
            self.socket = socket
            self.ride = ride
        }
    }

    /// A group copy: its group, and how the caller checks both ends' membership. `admit`
    /// is asked first with nil, then after a store that found the group changed (with
    /// that result) for a fresh check, at most three times more.
    public struct GroupCopy: Sendable {
        public var groupId: String
        public var admit: @Sendable (_ after: PendingQueue.StoreResult?) async throws -> PendingQueue.GroupCheck

        public init(groupId: String, admit: @escaping @Sendable (_ after: PendingQueue.StoreResult?) async throws -> PendingQueue.GroupCheck) {
            self.groupId = groupId
            self.admit = admit
        }
    }

    /// Checks, stores and passes on one message, in four steps: `check`, `store`, the
    /// sender's answer (`answer`) and the recipient's delivery (`deliver`). Refusals are
    /// thrown as `WhisperError`s for the caller to answer; a duplicate is answered here
    /// like a new message. `redeliver`: the same message handled a second time (a stream
    /// entry whose router died), delivered again when it is still pending.
    @discardableResult
    public func send(
        _ message: SendMessage, from sender: Sender, group: GroupCopy? = nil, redeliver: Bool = false, caller: some Caller
    ) async throws -> RoutingOutcome {
        let checked = try await check(message, group: group, sentBy: sender.whisperId)
        var encoded: [UInt8]?
        func received() -> [UInt8] {
            if let encoded { return encoded }
            let frame = ServerFrameCodec.encode(.messageReceived, payloadJSON: checked.body)
            encoded = frame
            return frame
        }
        // A direct peer's message to a socket on this instance goes out while its store is
        // written (docs/architecture.md, "Delivered while it is stored"); the sender is
        // still told only once the store answers.
        let early = group == nil && !redeliver && !checked.fromStranger ? caller.deliverEarly(received, message: message, sender: sender) : nil
        // Any refusal or failure thrown from here on settles it as not stored.
        var settledEarly = false
        defer { if early != nil, !settledEarly { caller.settle(message, stored: false, receiptRecorded: false) } }
        let outcome = try await store(
            message, checked, group: group, redeliver: redeliver, written: early != nil ? caller.storeWritten : nil,
            mayWait: early != nil ? caller.storeMayWait : .zero, ride: early?.ride, caller: caller
        )
        let stored = try isNew(outcome.result, message, fromStranger: checked.fromStranger)
        let accept = try await answer(message, sender: sender, receipt: outcome.receipt, caller: caller)
        if early != nil {
            settledEarly = true
            caller.settle(message, stored: true, receiptRecorded: outcome.receipt != nil)
        }
        return try await deliver(
            message, received, to: outcome.recipientSocket, early: early?.socket, stored: stored, after: accept, sender: sender, caller: caller
        )
    }

    /// What `check` found: the body to store and deliver, the group's membership as
    /// checked, and whether the sender is a stranger to the recipient.
    struct Checked {
        var body: [UInt8]
        var membership: PendingQueue.GroupCheck?
        var fromStranger: Bool
    }

    /// Step 1: the message's checks (`MessageChecks`), a group copy's membership, the
    /// attachment's recipients, and whether the sender is the recipient's direct peer.
    private func check(_ message: SendMessage, group: GroupCopy?, sentBy whisperId: String) async throws -> Checked {
        let body = try await checks.check(message, groupId: group?.groupId, sentBy: whisperId)
        let membership = try await group?.admit(nil)
        if let attachment = message.attachment {
            try await attachments.admit(attachment, sender: message.from, recipient: message.to, messageId: message.messageId)
        }
        // A group copy is not a stranger's: both ends are members of the group (a member
        // that is not the owner's direct peer joined by accepting an invitation).
        let fromStranger = try await group == nil ? !peers.arePeers(message.from, message.to, on: redis) : false
        return Checked(body: body, membership: membership, fromStranger: fromStranger)
    }

    /// Step 2: the store script, with the caller's work alongside. A group copy whose
    /// group changed meanwhile is checked again and stored again, at most three times more.
    private func store(
        _ message: SendMessage, _ checked: Checked, group: GroupCopy?, redeliver: Bool, written: (@Sendable () -> Void)?, mayWait: Duration,
        ride: ReceiptRide?, caller: some Caller
    ) async throws -> PendingQueue.StoreOutcome {
        var membership = checked.membership
        var attempts = 0
        while true {
            let (commands, returned) = caller.alongside()
            let outcome: PendingQueue.StoreOutcome
            do {
                outcome = try await pending.store(
                    recipient: message.to, messageId: message.messageId, sender: message.from, body: checked.body, redeliver: redeliver,
                    pairLimit: pairLimit, fromStranger: checked.fromStranger, group: membership, alongside: commands, written: written,
                    mayWait: mayWait, ride: ride
                )
            } catch {
                returned(nil)
                throw error
            }
            returned(outcome.alongside)
            attempts += 1
            switch outcome.result {
            case .stale, .notMember:
                guard let group, attempts < 4 else { return outcome }
                membership = try await group.admit(outcome.result)
            default:
                return outcome
            }
        }
    }

    /// Whether the store took the message as new (false: a client's resend, answered as
    /// before, nothing queued); a refusal is thrown.
    private func isNew(_ result: PendingQueue.StoreResult, _ message: SendMessage, fromStranger: Bool) throws -> Bool {
        switch result {
        case .stored(_, let depth):
            if fromStranger { peers.stored(message.from, message.to) }
            metrics.queueDepth(depth)
            return true
        case .duplicate:
            return false
        case .notMember:
            throw WhisperError(.forbidden, "to is not a member of this group")
        case .stale:
            throw WhisperError(.internalError, "the group is changing; try again")
        case .conflict, .limited, .full, .strangersFull:
            throw PendingQueue.refusal(for: result, metrics: metrics)
        }
    }

    /// Step 3: the sender's answer, written by the caller or returned as the command
    /// that publishes it. With replicas required (`WHISPER_REDIS_WAIT_REPLICAS`, on by
    /// default in cluster mode) it waits for them. A shortfall is accepted by default
    /// (the message stands on its master's fsync); with `WHISPER_REDIS_WAIT_SHORTFALL=
    /// refuse` the message is passed on all the same and its sender asked to send it
    /// again (a resend is a duplicate, answered once the replicas have it). A `delivered`
    /// receipt recorded with the message (`receipt`, its timestamp) follows as the
    /// sender's `message_delivered`.
    private func answer(_ message: SendMessage, sender: Sender, receipt: Int64?, caller: some Caller) async throws -> [RedisCommand] {
        var answer = ServerFrameCodec.encode(MessageAccepted(messageId: message.messageId), requestId: sender.requestId)
        var accepted = true
        do {
            try await redis.waitForReplicas(afterWritingTo: RedisKeys.pending(message.to))
        } catch RedisError.replicasBehind {
            accepted = false
            answer = ServerFrameCodec.encodeError(
                .internalError, "the message is stored but not yet copied to a replica; send it again", requestId: sender.requestId
            )
        }
        var commands = caller.accept(answer).map { [$0] } ?? []
        if accepted, let receipt {
            let delivered = PendingQueue.deliveredFrame(messageId: message.messageId, status: .delivered, timestamp: receipt, from: message.to)
            if let command = caller.accept(delivered) { commands.append(command) }
        }
        return commands
    }

    /// Step 4: `message_received` to the recipient's socket unless it went out early
    /// (here, or published to its gateway with the sender's answer), else a wake-up.
    private func deliver(
        _ message: SendMessage, _ received: () -> [UInt8], to socket: PresenceRecord?, early: PresenceRecord?, stored: Bool,
        after accept: [RedisCommand], sender: Sender, caller: some Caller
    ) async throws -> RoutingOutcome {
        var commands = accept
        var live = early != nil && socket == early
        var published: Int?
        if let socket, socket != early {
            if let written = caller.deliverHere(received(), to: socket, message: message, sender: sender) {
                live = written
            } else {
                let deliver = GatewayCommand(
                    kind: .deliver, connId: socket.connId, frame: received(), acceptedAt: sender.receivedAt, traceparent: sender.traceparent,
                    origin: sender.origin
                )
                published = commands.count
                commands.append(deliver.publishing(to: socket.gateway))
            }
        }
        if let published, !caller.waitsForPublishes {
            // Delivered (or, when that gateway is gone, queued with a wake-up) once the
            // reply is in, while the caller goes on.
            try redis.dispatch(commands).whenComplete { [self] result in
                let reached = (try? result.get()).map { Self.reached($0, published) } ?? false
                guard stored else { return }
                metrics.routed(reached ? .delivered : .queued)
                if !reached {
                    Task { try? await pushJob(for: message) }
                }
            }
            if !stored { metrics.routed(.duplicate) }
            return stored ? .delivered : .duplicate
        }
        if !commands.isEmpty {
            let replies = try await redis.pipeline(commands)
            if let published { live = Self.reached(replies, published) }
        }
        guard stored else {
            metrics.routed(.duplicate)
            return .duplicate
        }
        if !live {
            try await pushJob(for: message)
        }
        let routed: RoutingOutcome = live ? .delivered : .queued
        metrics.routed(routed)
        return routed
    }

    /// Whether the publish at `index` of `replies` reached a subscriber (its gateway).
    private static func reached(_ replies: [RESPValue], _ index: Int) -> Bool {
        index < replies.count && (replies[index].int ?? 0) > 0
    }

    /// The wake-up of a recipient with no live socket (`stream:push`).
    private func pushJob(for message: SendMessage) async throws {
        try await redis.send(PushStream.job(to: message.to, kind: .message, id: message.messageId, at: Clock.millisecondsNow(), in: redis.configuration.streamShards))
    }
}

extension MessageSending.Caller {
    /// A caller that handles one message at a time ignores it.
    public func storeWritten() {}
    /// A caller that delivers nothing early writes each store at once.
    public var storeMayWait: Duration { .zero }
}

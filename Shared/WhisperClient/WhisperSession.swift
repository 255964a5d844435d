import Foundation
import Logging
import WhisperProtocol

/// What an app keeps between runs to come back as the same identity without signing in
/// again: the identity and its session (`WhisperSession` hands out every new one as
/// ``SessionEvent/credentials(_:)``).
public struct SessionCredentials: Codable, Sendable, Equatable {
    public var whisperId: String
    public var sessionToken: String
    /// When the session ends (ms since 1970).
    public var expiresAt: Int64

    public init(whisperId: String, sessionToken: String, expiresAt: Int64) {
        self.whisperId = whisperId
        self.sessionToken = sessionToken
        self.expiresAt = expiresAt
    }
}

/// Where a ``WhisperSession`` is: the one thing an app shows about the connection.
public enum SessionState: Sendable, Equatable {
    /// Not started, or stopped (the app went to the background).
    case idle
    /// Opening a socket to `gateway` and signing in on it.
    case connecting(gateway: String, attempt: Int)
    /// Signed in on `gateway`: frames flow, the outbox is being sent.
    case connected(gateway: String)
    /// Waiting before the next try, at `nextTryAt` (ms since 1970).
    case backingOff(attempt: Int, nextTryAt: Int64)
    /// The session ended for a reason the session object must not undo by itself.
    case signedOut(SignOutReason)

    /// Signed in on a socket: frames flow.
    public var isConnected: Bool {
        if case .connected = self { return true }
        return false
    }
}

/// Why a session is over for good (until the app signs in again).
public enum SignOutReason: String, Sendable, Equatable {
    /// The app called ``WhisperSession/signOut()``.
    case signedOut = "signed_out"
    /// Another device signed in with the identity's phrase (`replaced_by_new_device`).
    case replacedByNewDevice = "replaced_by_new_device"
    /// The session was logged out through another path (`logged_out`).
    case loggedOut = "logged_out"
    /// The operator banned the identity (`banned`); signing in again is refused while it lasts.
    case banned
    /// The identity was deleted (``WhisperSession/deleteAccount()``, or `account_deleted`
    /// from the server).
    case deleted = "account_deleted"
    /// The server no longer knows the session and ``WhisperSession/Configuration/registerAgain``
    /// is off (another device may have taken the identity while this one was away).
    case sessionEnded = "session_ended"
}

/// What a ``WhisperSession`` tells the app besides its state.
public enum SessionEvent: Sendable {
    /// A message, the first time it arrives (copies that come again are dropped and,
    /// once the app acknowledged them, acknowledged again). Verify, decrypt, store, then
    /// ``WhisperSession/acknowledge(_:status:)``.
    case message(MessageReceived)
    /// A delivery or read receipt for a message of the outbox (its state moved on).
    case receipt(MessageDelivered)
    /// An outgoing message changed state (``SendQueue``): accepted by the server, or failed.
    case outgoing(messageId: String, state: OutgoingState)
    /// The presence of the watched peers, on every (re)subscription
    /// (``WhisperSession/watchPresence(_:)``); changes then come as `presence` frames.
    case presenceSnapshot(PresenceSnapshot)
    /// New credentials (after sign-in or refresh): keep them in the keychain.
    case credentials(SessionCredentials)
    /// The key directory check of the identity's own entry, or of a head, failed: the
    /// app must tell the person (docs/key-transparency.md).
    case directoryAlert(KeyTransparencyError)
    /// The floor of a push-to-talk channel as asked again after a reconnect
    /// (``WhisperSession/requestFloor(_:queue:)``): granted again, queued again, or refused.
    case floor(PTTFloor)
    /// What happened in a live-text conversation the session whispers in
    /// (``WhisperSession/whisper(in:name:)``): a listener's request is the app's to
    /// `admit` or `refuse` on the ``LiveWhisperer``.
    case whisperer(conversationId: String, LiveWhisperer.Event)
    /// What happened in a live-text conversation the session listens to
    /// (``WhisperSession/listen(to:name:)``).
    case listener(conversationId: String, LiveListener.Event)
    /// Any other frame the server sent unasked (presence, typing, groups, calls, live
    /// text, push-to-talk).
    case frame(ServerFrame)
}

/// A connection to Whisper that keeps itself up, so the app writes no reconnect code: it
/// resumes or renews the session, walks the pending queue, takes back presence, live places
/// and floors, sends the outbox, and after a loss waits the protocol's backoff for another
/// gateway. It never undoes a revocation (``SessionState/signedOut(_:)``). The app reads
/// ``states`` and ``events`` and calls ``networkChanged()``, ``stop()`` and ``start()``.
public actor WhisperSession {
    public struct Configuration: Sendable {
        /// WebSocket URLs (`wss://…/ws`), tried in turn: one behind an edge balancer, or
        /// each gateway's own.
        public var gateways: [String]
        public var deviceId: String
        public var platform: Platform
        public var pushToken: String?
        public var voipToken: String?
        /// Between tries after a loss: a random delay up to `initial · 2^attempt`, at most `maximum`.
        public var backoff = Backoff.Policy(initial: .milliseconds(500), maximum: .seconds(30))
        /// The backoff starts again from its first step only after a socket stayed signed
        /// in this long: a gateway that takes sockets and drops them is tried ever more
        /// slowly, not every half second for ever.
        public var healthyAfter: Duration = .seconds(30)
        /// The first try after losing a socket that was healthy waits a random delay up to
        /// this (at most the backoff's `maximum`), so that the apps of a gateway that died
        /// do not all come back to the others in the same second.
        public var firstRetrySpread: Duration = .seconds(5)
        /// Events ``WhisperSession/events`` holds for the app, at most. Past it new events
        /// are dropped (logged `session_events_dropped`), so a server that floods the
        /// socket cannot grow the app's memory: a message dropped so was not acknowledged
        /// and comes again with the next walk of the pending queue; other events are lost.
        public var eventBufferMax = 10_000
        /// How often an idle socket is checked with `ping`.
        public var pingInterval: Duration = .seconds(20)
        /// How long a `ping` may take before the socket is taken for dead.
        public var pingTimeout: Duration = .seconds(10)
        /// How long opening a socket (TCP, TLS, the upgrade) may take.
        public var connectTimeout: Duration = .seconds(15)
        /// A session with less than this left is refreshed.
        public var refreshBefore: Duration = .seconds(86_400)
        /// How often the identity's own key directory entry is checked: at the first
        /// sign-in, then on this clock whatever the reconnects (a reconnect checks only
        /// when a check is due, so a gateway's restart does not send every app's lookup
        /// to auth at once).
        public var monitorInterval: Duration = .seconds(300)
        /// Once the own entry was proven, how long checks may keep failing (the server
        /// unreachable, or answering errors) before ``KeyTransparencyError/ownEntryHidden``.
        /// An answer that the entry waits for an epoch, or a 404, is that alert at once.
        public var ownEntryGrace: Duration = .seconds(900)
        /// When the server no longer knows the session (it expired, or its store lost it),
        /// register again from the keys (the same identity, this device). Off: the state
        /// becomes ``SessionState/signedOut(_:)`` with ``SignOutReason/sessionEnded`` and the
        /// person decides (another device may have signed in meanwhile, and registering
        /// would sign that one out).
        public var registerAgain = true
        /// The device this app listens to live text as (``ListenerDevice/issue(websocketURL:)``,
        /// kept by the app): every socket is opened with it, so ``WhisperSession/listen(to:name:)``
        /// works. Nil: the session does not listen.
        public var listenerDevice: ListenerDevice?

        public init(gateways: [String], deviceId: String, platform: Platform, pushToken: String? = nil, voipToken: String? = nil) {
            self.gateways = gateways
            self.deviceId = deviceId
            self.platform = platform
            self.pushToken = pushToken
            self.voipToken = voipToken
        }

        /// For a session that only listens (``WhisperSession/init(listeningWith:logger:)``):
        /// the listener device is all it is; nothing registers, so `deviceId` is the
        /// device's and `platform` is never sent.
        public static func listening(gateways: [String], device: ListenerDevice) -> Configuration {
            var configuration = Configuration(gateways: gateways, deviceId: device.deviceId, platform: .android)
            configuration.listenerDevice = device
            return configuration
        }
    }

    public nonisolated let states: AsyncStream<SessionState>
    public nonisolated let events: AsyncStream<SessionEvent>
    private let stateContinuation: AsyncStream<SessionState>.Continuation
    private let eventContinuation: AsyncStream<SessionEvent>.Continuation

    public nonisolated let configuration: Configuration
    /// The identity's keys; nil for a session that only listens (``init(listeningWith:logger:)``).
    public nonisolated let keys: WhisperKeys?
    /// The HTTP half, with the key directory this client holds (kept across reconnects).
    public nonisolated let api: WhisperAPI?
    /// The outbox: every message sent through ``send(_:)`` until the server accepted it.
    public nonisolated let outbox: SendQueue
    public private(set) var state: SessionState = .idle
    public private(set) var credentials: SessionCredentials?

    private let logger: Logger
    private var runner: Task<Void, Never>?
    private var connection: WhisperConnection?
    /// Wakes a backoff early (`networkChanged`) or the flusher (a new message).
    private var alarms: [Alarm: CheckedContinuation<Void, Never>] = [:]
    /// Callers waiting for a connected socket, each under its own number (its deadline
    /// fails it alone).
    private var connectedWaiters: [Int: CheckedContinuation<Void, any Error>] = [:]
    private var nextWaiter = 0
    private var shown = MessageDeduplicator()
    /// The messages the app acknowledged as delivered: loaded from `delivered` before the
    /// first message is taken, each new one recorded there as it is acknowledged.
    private var acknowledged = MessageDeduplicator(capacity: 10_000)
    private let delivered: any DeliveredStore
    private var deliveredLoaded = false
    /// Lines the store's record holds (compacted past twice what is remembered).
    private var deliveredRecorded = 0
    /// Heads peers sent that were compared with this client's log (at most 1,000; then
    /// begun again): each is compared once, not once per message.
    private var comparedHeads: Set<DirectoryHead> = []
    private var presenceWatched: [String] = []
    /// Push-to-talk floors the app holds or waits for, by channel (the value: whether it
    /// queues). A floor, and a place waiting for one, belong to the socket (the server
    /// gives them up when it goes), so each is asked for again after every reconnect.
    private var floorsWanted: [String: Bool] = [:]
    /// Live-text conversations the session whispers in and listens to, by conversation:
    /// their places belong to the socket too, so each is taken again after a reconnect.
    private var whisperers: [String: LiveWhisperer] = [:]
    private var listeners: [String: LiveListener] = [:]
    private var gatewayIndex = 0
    /// The own-entry monitor's memory, kept across sockets.
    private var ownEntry = OwnEntryWatch()
    /// Set by `networkChanged`: the next try starts at once.
    private var skipBackoff = false

    /// `credentials`: the session the app kept (nil: register the keys' identity on the
    /// first connect). `api`: for the key directory checks (nil: none are made).
    /// `outbox` and `delivered`: where the app keeps what it sends and which messages it
    /// stored (``FileOutboxStore``, ``FileDeliveredStore``; in memory, a restarted app
    /// loses its unsent messages and may show a message that comes again twice).
    public init(
        configuration: Configuration, keys: WhisperKeys, credentials: SessionCredentials?, api: WhisperAPI? = nil,
        outbox: any OutboxStore = MemoryOutboxStore(), delivered: any DeliveredStore = MemoryDeliveredStore(),
        retry: RetryPolicy = RetryPolicy(), logger: Logger = Logger(label: "whisper-session")
    ) {
        self.init(
            configuration: configuration, keys: Optional(keys), credentials: credentials, api: api, outbox: outbox, delivered: delivered,
            retry: retry, logger: logger
        )
    }

    /// A session with no identity that only listens to live text, as the device a listen
    /// link made (``Configuration/listenerDevice``, which it needs): it keeps its socket
    /// up like any session (backoff, `reconnect` notices, pings) and takes its
    /// listeners' places again after each reconnect. Whatever needs an identity
    /// (messages, presence, floors, whispering, deleting) throws
    /// ``WhisperClientError/noIdentity``.
    public init(listeningWith configuration: Configuration, logger: Logger = Logger(label: "whisper-session")) {
        precondition(configuration.listenerDevice != nil, "a listening session needs a listener device")
        self.init(
            configuration: configuration, keys: nil, credentials: nil, api: nil, outbox: MemoryOutboxStore(), delivered: MemoryDeliveredStore(),
            retry: RetryPolicy(), logger: logger
        )
    }

    private init(
        configuration: Configuration, keys: WhisperKeys?, credentials: SessionCredentials?, api: WhisperAPI?, outbox: any OutboxStore,
        delivered: any DeliveredStore, retry: RetryPolicy, logger: Logger
    ) {
        self.delivered = delivered
        precondition(!configuration.gateways.isEmpty, "a session needs at least one gateway URL")
        self.configuration = configuration
        self.keys = keys
        self.credentials = credentials
        self.api = api
        self.outbox = SendQueue(store: outbox, policy: retry)
        self.logger = logger
        (states, stateContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(64))
        (events, eventContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(max(1, configuration.eventBufferMax)))
    }

    // MARK: - The app's hooks

    /// Starts keeping the connection (again, after ``stop()``).
    public func start() {
        guard runner == nil else { return }
        if case .signedOut = state { return }
        runner = Task { await self.run() }
    }

    /// Closes the socket and stops reconnecting (the app went to the background);
    /// ``start()`` resumes cleanly: the outbox and subscriptions are kept.
    public func stop() async {
        await finish(stopLoop())
        if case .signedOut = state { return }
        set(.idle)
    }

    /// The device's network changed: the current socket may be dead without knowing it.
    /// Opens a new one now, skipping any backoff.
    public func networkChanged() async {
        skipBackoff = true
        wake(.backoff)
        await connection?.close()
    }

    /// Ends the session on the server and stops; ``SessionState/signedOut(_:)``.
    public func signOut() async {
        // The loop first, so that nothing signs in again while the logout is on its way.
        let loop = stopLoop()
        if let connection, let token = credentials?.sessionToken {
            _ = try? await connection.request(Logout(sessionToken: token), timeout: .seconds(5))
        }
        credentials = nil
        set(.signedOut(.signedOut))
        await finish(loop)
    }

    /// Deletes the identity for good (`account_delete`, signed with the session's keys),
    /// then stops: ``SessionState/signedOut(_:)`` with ``SignOutReason/deleted``. Needs a
    /// socket (throws while there is none: ask the person to try again when online); the
    /// app then forgets the phrase's Whisper ID and everything it kept of the identity.
    @discardableResult
    public func deleteAccount() async throws -> AccountDeleted {
        guard let keys else { throw WhisperClientError.noIdentity }
        guard let connection, state.isConnected else { throw WhisperClientError.notConnected }
        let deleted = try await connection.deleteAccount(keys: keys)
        let loop = stopLoop()
        credentials = nil
        set(.signedOut(.deleted))
        await finish(loop)
        return deleted
    }

    /// No new socket from here on: the loop is told to end (it is returned to `finish`).
    private func stopLoop() -> Task<Void, Never>? {
        let loop = runner
        runner = nil
        loop?.cancel()
        return loop
    }

    /// Closes the socket, out of any backoff, and waits for the loop to end.
    private func finish(_ loop: Task<Void, Never>?) async {
        wake(.backoff)
        await connection?.close()
        await loop?.value
    }

    // MARK: - What the app does through it

    /// Puts a message in the outbox (persisted first) and sends it as soon as a socket is
    /// up; its progress comes as ``SessionEvent/outgoing(messageId:state:)``.
    public func send(_ message: SendMessage) async throws {
        guard keys != nil else { throw WhisperClientError.noIdentity }
        try await outbox.enqueue(message)
        wake(.flush)
    }

    /// Puts a group message's copies in the outbox (``MessageCrypto/makeGroupCopies(_:groupId:from:to:sessionToken:msgType:messageId:timestamp:replyTo:attachment:directoryHead:)``)
    /// and sends each as soon as a socket is up, resent with the message's one messageId
    /// until the server took it; each copy's progress comes as ``SessionEvent/outgoing(messageId:state:)``.
    public func send(group copies: [GroupSendMessage]) async throws {
        guard keys != nil else { throw WhisperClientError.noIdentity }
        try await outbox.enqueue(group: copies)
        wake(.flush)
    }

    /// Acknowledges a message the app has stored (`delivered`) or shown (`read`). Without
    /// a socket just now it is remembered: the server hands the message over again on the
    /// next one (it stays pending until acknowledged), and the session acknowledges it then.
    /// A `delivered` acknowledgement is also recorded in the session's ``DeliveredStore``:
    /// a copy of the message that comes again, after any time, is acknowledged and not shown.
    public func acknowledge(_ message: MessageReceived, status: ReceiptStatus = .delivered) async throws {
        if status == .delivered {
            await loadDelivered()
            if acknowledged.firstSighting(message.messageId, in: message.from) { await record(DeliveredMessage(conversation: message.from, messageId: message.messageId)) }
        }
        guard let connection, state.isConnected else { return }
        do {
            try await connection.acknowledge(message, status: status)
        } catch WhisperClientError.notConnected, WhisperClientError.closed {
            // The socket just went: as above.
        }
    }

    /// Walks the pending queue now (a push woke the app): what waited comes as
    /// ``SessionEvent/message(_:)``, each once. Every (re)connect does it by itself.
    public func fetchPending() async throws {
        try await connected { connection, _ in try await self.walk(connection) }
    }

    /// Watches these peers' presence, now and after every reconnect.
    public func watchPresence(_ whisperIds: [String]) async throws {
        guard keys != nil else { throw WhisperClientError.noIdentity }
        presenceWatched = whisperIds
        if let connection, state.isConnected {
            tell(.presenceSnapshot(try await connection.subscribePresence(whisperIds)))
        }
    }

    /// Asks for the floor of a push-to-talk channel (waiting in its queue when `queue`), and
    /// asks again after every reconnect until ``releaseFloor(_:)``, or until an answer
    /// refuses it; the floor as asked again comes as ``SessionEvent/floor(_:)``.
    public func requestFloor(_ channelId: String, queue: Bool = false) async throws -> PTTFloor {
        guard keys != nil else { throw WhisperClientError.noIdentity }
        floorsWanted[channelId] = queue
        let floor = try await connected { connection, _ in try await connection.requestTalk(channelId, queue: queue) }
        if floor.outcome == .refused { floorsWanted[channelId] = nil }
        return floor
    }

    /// Gives the floor up, or the place waiting for it; nil without a socket (the server
    /// gave it up when the socket went).
    @discardableResult
    public func releaseFloor(_ channelId: String) async throws -> PTTFloor? {
        floorsWanted[channelId] = nil
        guard let connection, state.isConnected else { return nil }
        return try await connection.releaseTalk(channelId)
    }

    /// Whispers in one of the identity's live-text conversations from now on, and again
    /// after every reconnect, until ``stopWhispering(in:)`` or the conversation's deletion.
    /// Type through the returned ``LiveWhisperer``; what happens in the conversation comes
    /// as ``SessionEvent/whisperer(conversationId:_:)``.
    public func whisper(in conversationId: String, name: String, timeout: Duration = .seconds(30)) async throws -> LiveWhisperer {
        if let kept = whisperers[conversationId] { return kept }
        let socket = try await connected(timeout: timeout) { connection, _ in connection }
        let whisperer = LiveWhisperer(connection: socket, conversationId: conversationId, name: name)
        try await whisperer.start()
        whisperers[conversationId] = whisperer
        // A reconnect while it started: it takes its place on the new socket too.
        if let connection, connection !== socket { try await whisperer.moved(to: connection) }
        return whisperer
    }

    /// Leaves the conversation (its listeners are told) and stops taking it again.
    public func stopWhispering(in conversationId: String) async {
        guard let whisperer = whisperers.removeValue(forKey: conversationId) else { return }
        if state.isConnected { try? await whisperer.drop() }
    }

    /// Listens to a live-text conversation from now on (needs
    /// ``Configuration/listenerDevice``), and again after every reconnect, until
    /// ``stopListening(to:)``, a refusal, or the conversation's deletion. What happens
    /// comes as ``SessionEvent/listener(conversationId:_:)``.
    public func listen(to conversationId: String, name: String, timeout: Duration = .seconds(30)) async throws -> LiveListener {
        guard configuration.listenerDevice != nil else { throw WhisperClientError.notListenerDevice }
        if let kept = listeners[conversationId] { return kept }
        let socket = try await socket(timeout: timeout)
        let listener = LiveListener(connection: socket, conversationId: conversationId, name: name)
        try await listener.start()
        listeners[conversationId] = listener
        if let connection, connection !== socket { try await listener.moved(to: connection) }
        return listener
    }

    /// Leaves the conversation and stops listening to it.
    public func stopListening(to conversationId: String) async {
        guard let listener = listeners.removeValue(forKey: conversationId) else { return }
        if state.isConnected { try? await listener.drop() }
    }

    /// Runs `body` on the signed-in socket, waiting up to `timeout` for one.
    public func connected<T: Sendable>(
        timeout: Duration = .seconds(30), _ body: @Sendable (WhisperConnection, String) async throws -> T
    ) async throws -> T {
        guard keys != nil else { throw WhisperClientError.noIdentity }
        let socket = try await socket(timeout: timeout)
        guard let token = credentials?.sessionToken else { throw WhisperClientError.notConnected }
        return try await body(socket, token)
    }

    /// The connected socket (signed in, unless the session only listens), waiting up to
    /// `timeout` for one. A socket that went again between being connected and this
    /// call resuming (the session's actor runs other work in between) is waited for
    /// again, within the same `timeout`.
    private func socket(timeout: Duration) async throws -> WhisperConnection {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let connection, state.isConnected { return connection }
            let left = deadline - .now
            guard left > .zero else { throw WhisperClientError.timedOut }
            try await waitForConnection(timeout: left)
        }
    }

    /// Whether events are being dropped (the app's buffer is full), for one log line per spell.
    private var eventsOverflowing = false

    /// Hands an event to the app (``Configuration/eventBufferMax``); false when it was dropped.
    @discardableResult
    private func tell(_ event: SessionEvent) -> Bool {
        if case .dropped = eventContinuation.yield(event) {
            if !eventsOverflowing { logger.warning("session_events_dropped", metadata: ["buffer": "\(configuration.eventBufferMax)"]) }
            eventsOverflowing = true
            return false
        }
        eventsOverflowing = false
        return true
    }

    // MARK: - The loop

    private func run() async {
        var backoff = Backoff(policy: configuration.backoff)
        while !Task.isCancelled {
            /// When this try's socket signed in (nil: it never did).
            var connectedAt: ContinuousClock.Instant?
            let gateway = configuration.gateways[gatewayIndex % configuration.gateways.count]
            set(.connecting(gateway: gateway, attempt: backoff.attempt + 1))
            let socket = WhisperConnection(url: gateway, listenerDevice: configuration.listenerDevice, logger: logger)
            var hint: Duration?
            do {
                try await open(socket)
                if let keys { try await signIn(with: keys, on: socket) }
                connection = socket
                try await restore(on: socket)
                set(.connected(gateway: gateway))
                connectedAt = .now
                hint = try await serve(socket)
            } catch let ended as SessionEnded {
                await socket.close()
                connection = nil
                credentials = nil
                // A sign-out the app asked for stays that.
                if case .signedOut = state {} else { set(.signedOut(ended.reason)) }
                failWaiters(WhisperClientError.closed(code: 4001))
                runner = nil
                return
            } catch {
                logger.debug("session_socket_lost", metadata: ["gateway": "\(gateway)", "error": "\(type(of: error))"])
            }
            connection = nil
            await socket.close()
            if Task.isCancelled { break }
            gatewayIndex += 1
            // After a healthy socket the backoff starts again; otherwise it keeps growing.
            let wasHealthy = connectedAt.map { ContinuousClock.now - $0 >= configuration.healthyAfter } ?? false
            if wasHealthy { backoff.reset() }
            let delay: Duration
            if skipBackoff {
                delay = .zero
            } else if let hint {
                delay = hint
            } else if wasHealthy {
                // Its first try is spread, and counts as the backoff's first step.
                _ = backoff.next()
                let spread = min(configuration.firstRetrySpread, configuration.backoff.maximum).nanoseconds
                delay = .nanoseconds(Int64.random(in: 0...max(0, spread)))
            } else {
                delay = backoff.next()
            }
            skipBackoff = false
            set(.backingOff(attempt: backoff.attempt, nextTryAt: Clock.millisecondsNow() + Int64(delay.milliseconds)))
            await sleep(delay, until: .backoff)
        }
        connection = nil
    }

    /// Opens the socket, closing it when that takes longer than `connectTimeout` (a
    /// network that drops packets never answers).
    private func open(_ socket: WhisperConnection) async throws {
        let limit = configuration.connectTimeout
        let timer = Task {
            try await Task.sleep(for: limit)
            await socket.close()
        }
        defer { timer.cancel() }
        try await socket.connect()
    }

    /// The session on this socket: the kept one (refreshed when it ends soon), or a new
    /// one from the keys when there is none or the server no longer knows it.
    private func signIn(with keys: WhisperKeys, on socket: WhisperConnection) async throws {
        if let kept = credentials, kept.expiresAt - Clock.millisecondsNow() > 60_000 {
            await socket.resume(whisperId: kept.whisperId, sessionToken: kept.sessionToken)
            do {
                if Duration.milliseconds(kept.expiresAt - Clock.millisecondsNow()) < configuration.refreshBefore {
                    let refreshed = try await socket.refreshSession()
                    keep(SessionCredentials(whisperId: kept.whisperId, sessionToken: refreshed.sessionToken, expiresAt: refreshed.sessionExpiresAt))
                }
                // Binds the socket to the session (the first privileged frame does).
                _ = try await socket.fetchPending(limit: 1)
                return
            } catch WhisperClientError.refused(.notRegistered, _) {
                // The server lost the session (it expired, or its store was emptied):
                // the keys make a new one for the same identity below.
                guard configuration.registerAgain else { throw SessionEnded(reason: .sessionEnded) }
            }
        } else if credentials != nil, !configuration.registerAgain {
            throw SessionEnded(reason: .sessionEnded)
        }
        let ack = try await register(keys, on: socket)
        keep(SessionCredentials(whisperId: ack.whisperId, sessionToken: ack.sessionToken, expiresAt: ack.sessionExpiresAt))
    }

    private func register(_ keys: WhisperKeys, on socket: WhisperConnection) async throws -> RegisterAck {
        do {
            return try await socket.register(
                keys: keys, deviceId: configuration.deviceId, platform: configuration.platform, whisperId: credentials?.whisperId,
                pushToken: configuration.pushToken, voipToken: configuration.voipToken
            )
        } catch WhisperClientError.refused(.userBanned, _) {
            throw SessionEnded(reason: .banned)
        } catch WhisperClientError.refused(.notFound, _) where credentials != nil {
            throw SessionEnded(reason: .deleted)
        }
    }

    private func keep(_ new: SessionCredentials) {
        credentials = new
        tell(.credentials(new))
    }

    /// What the socket needs after every (re)connect: presence watched again, the
    /// floors asked for again, the live-text places taken again, the pending queue
    /// walked, the own directory entry checked. A place the server refuses for now
    /// (over a limit, busy) is taken again later on the same socket (``retake(on:)``).
    private func restore(on socket: WhisperConnection) async throws {
        var places: [Place] = presenceWatched.isEmpty ? [] : [.presence]
        places += floorsWanted.keys.sorted().map(Place.floor)
        places += whisperers.keys.sorted().map(Place.whisperer)
        places += listeners.keys.sorted().map(Place.listener)
        deferred = []
        for place in places where try await !take(place, on: socket) {
            deferred.append(place)
        }
        // A session that only listens has no queue.
        if keys != nil { try await walk(socket) }
    }

    /// What the session holds on a socket and takes again on the next one.
    private enum Place: Hashable {
        case presence
        case floor(String)
        case whisperer(String)
        case listener(String)
    }

    /// Takes one place on `socket`: true when it is taken, or gone for good (deleted, no
    /// longer a member: dropped and told); false when the server refused it for now.
    private func take(_ place: Place, on socket: WhisperConnection) async throws -> Bool {
        do {
            switch place {
            case .presence:
                guard !presenceWatched.isEmpty else { return true }
                tell(.presenceSnapshot(try await socket.subscribePresence(presenceWatched)))
            case .floor(let channelId):
                guard let queue = floorsWanted[channelId] else { return true }
                do {
                    let floor = try await socket.requestTalk(channelId, queue: queue)
                    if floor.outcome == .refused { floorsWanted[channelId] = nil }
                    tell(.floor(floor))
                } catch WhisperClientError.refused(let code, _) where code == .notFound || code == .forbidden {
                    floorsWanted[channelId] = nil  // no longer a member, or the channel is gone
                }
            case .whisperer(let conversationId):
                guard let whisperer = whisperers[conversationId] else { return true }
                do {
                    try await whisperer.moved(to: socket)
                } catch WhisperClientError.refused(.notFound, _) {
                    // Deleted while the socket was away (from another device).
                    whisperers[conversationId] = nil
                    tell(.whisperer(conversationId: conversationId, .deleted))
                }
            case .listener(let conversationId):
                guard let listener = listeners[conversationId] else { return true }
                do {
                    try await listener.moved(to: socket)
                } catch WhisperClientError.refused(.notFound, _) {
                    listeners[conversationId] = nil
                    tell(.listener(conversationId: conversationId, .whispererLeft(.deleted)))
                }
            }
            return true
        } catch WhisperClientError.refused(let code, _) where Self.refusedForNow.contains(code) {
            logger.debug("session_place_deferred", metadata: ["code": "\(code.rawValue)"])
            return false
        }
    }

    /// Refusals that say "not now" rather than "no": the place is asked for again.
    private static let refusedForNow: Set<ErrorCode> = [.rateLimited, .internalError]

    /// Places refused for now at the last restore, asked for again on the same socket
    /// after a delay that doubles (1 s up to the backoff's maximum) until each is taken.
    private var deferred: [Place] = []

    private func retake(on socket: WhisperConnection) async {
        var delay = Duration.seconds(1)
        while !deferred.isEmpty, !Task.isCancelled {
            try? await Task.sleep(for: delay)
            if Task.isCancelled || connection !== socket { return }
            var still: [Place] = []
            for place in deferred {
                do {
                    if try await !take(place, on: socket) { still.append(place) }
                } catch {
                    return  // the socket is going; the next one restores everything
                }
            }
            if connection !== socket { return }
            deferred = still
            delay = min(delay * 2, configuration.backoff.maximum)
        }
    }

    /// Pages of one walk of the pending queue, at most: 40,000 messages, eight times the
    /// server's default cap of a queue. What is left comes with the next walk.
    static let walkPagesMax = 200

    /// Walks the pending queue. A server that hands out a cursor not after the last one
    /// (repeated, or back), a cursor with an empty page, or pages without end, is not
    /// followed further: the walk stops, logged, and what is left comes with the next.
    private func walk(_ socket: WhisperConnection) async throws {
        var cursor: String?
        for _ in 0..<Self.walkPagesMax {
            let page = try await socket.fetchPending(cursor: cursor, limit: 200)
            for message in page.messages { await take(message, on: socket) }
            guard let next = page.nextCursor else { return }
            guard !page.messages.isEmpty, Format.isCursor(next, after: cursor) else {
                logger.warning("session_walk_stopped", metadata: ["reason": "a cursor that does not move on"])
                return
            }
            cursor = next
        }
        logger.warning("session_walk_stopped", metadata: ["reason": "\(Self.walkPagesMax) pages"])
    }

    /// Serves a signed-in socket until it closes; the `reconnect` hint when that is why.
    private func serve(_ socket: WhisperConnection) async throws -> Duration? {
        let outcome = await withTaskGroup(of: Served?.self) { group in
            group.addTask { await self.pump(socket) }
            group.addTask { await self.keepAlive(socket); return nil }
            group.addTask { await self.flush(on: socket); return nil }
            group.addTask { await self.monitor(); return nil }
            group.addTask { await self.retake(on: socket); return nil }
            // The pump ends with the socket; the helpers follow.
            var result: Served?
            for await served in group {
                if let served {
                    result = served
                    group.cancelAll()
                    wake(.flush)
                }
            }
            return result
        }
        switch outcome {
        case .revoked(let reason): throw SessionEnded(reason: reason)
        case .moveAfter(let delay): return delay
        case .closed, nil: return nil
        }
    }

    /// Five minutes: half the skew the server accepts (docs/protocol.md section 5).
    static let restampAfterMs: Int64 = 300_000

    private enum Served: Sendable {
        case closed
        case moveAfter(Duration)
        case revoked(SignOutReason)
    }

    private func pump(_ socket: WhisperConnection) async -> Served {
        for await frame in socket.events {
            if let message = frame.payload(as: MessageReceived.self) {
                await take(message, on: socket)
            } else if let receipt = frame.payload(as: MessageDelivered.self) {
                try? await outbox.receipt(messageId: receipt.messageId, status: receipt.status, from: receipt.from)
                tell(.receipt(receipt))
            } else if let notice = frame.payload(as: Reconnect.self) {
                await socket.close()
                return .moveAfter(notice.delay)
            } else if let revoked = frame.payload(as: SessionRevoked.self) {
                await socket.close()
                return .revoked(SignOutReason(rawValue: revoked.reason.rawValue) ?? .loggedOut)
            } else if await !live(frame) {
                tell(.frame(frame))
            }
        }
        return .closed
    }

    /// Hands a live-text frame to the whisperer or listener of its conversation; false
    /// for frames of anything else. A conversation that ended for this side (deleted,
    /// refused, let go) is not taken again after a reconnect.
    private func live(_ frame: ServerFrame) async -> Bool {
        guard frame.type.rawValue.hasPrefix("live_") else { return false }
        var handled = false
        for (conversationId, whisperer) in whisperers {
            guard let event = try? await whisperer.handle(frame) else { continue }
            handled = true
            if event == .deleted { whisperers[conversationId] = nil }
            tell(.whisperer(conversationId: conversationId, event))
        }
        for (conversationId, listener) in listeners {
            guard let event = try? await listener.handle(frame) else { continue }
            handled = true
            switch event {
            case .refused, .removed, .whispererLeft(.deleted): listeners[conversationId] = nil
            default: break
            }
            tell(.listener(conversationId: conversationId, event))
        }
        return handled
    }

    /// A message shown once; a copy of one the app acknowledged as delivered, in this run
    /// or an earlier one (``DeliveredStore``), is acknowledged again (the receipt was lost
    /// with a socket, or the sender resent it after the server forgot it); a copy of one
    /// the app still holds is dropped.
    private func take(_ message: MessageReceived, on socket: WhisperConnection) async {
        await loadDelivered()
        if acknowledged.contains(message.messageId, in: message.from) {
            try? await socket.acknowledge(message)
        } else if !shown.contains(message.messageId, in: message.from), tell(.message(message)) {
            // Remembered as shown only once the app's buffer took it: a message dropped
            // there is shown when it comes again.
            _ = shown.firstSighting(message.messageId, in: message.from)
            if let head = message.directoryHead { Task { await self.compare(head, from: message.from) } }
        }
    }

    /// Compares the head a peer sent with a message with this client's log (each head
    /// once): one that is not on it is ``KeyTransparencyError/splitView(peer:)``, the
    /// directory showing the two different views. One that cannot be compared now (no
    /// answer) is compared again when it comes with a later message.
    private func compare(_ head: DirectoryHead, from peer: String) async {
        guard let api else { return }
        guard comparedHeads.insert(head).inserted else { return }
        if comparedHeads.count > 1_000 { comparedHeads = [head] }
        do {
            try await api.compareHead(head, from: peer)
        } catch let problem as KeyTransparencyError {
            tell(.directoryAlert(problem))
        } catch {
            comparedHeads.remove(head)
            logger.debug("session_head_compare_failed", metadata: ["error": "\(error)"])
        }
    }

    /// Reads the app's record of delivered messages once, before the first is needed. A
    /// record that cannot be read is logged and the session goes on without it (a copy
    /// may then be shown again; nothing is lost).
    private func loadDelivered() async {
        guard !deliveredLoaded else { return }
        deliveredLoaded = true
        do {
            let recorded = try await delivered.load()
            for message in recorded { _ = acknowledged.firstSighting(message.messageId, in: message.conversation) }
            deliveredRecorded = recorded.count
        } catch {
            logger.warning("session_delivered_store_unreadable", metadata: ["error": "\(error)"])
        }
    }

    /// Records one acknowledged message, and compacts the record once it holds twice what
    /// the session remembers. A failure is logged: the acknowledgement still goes out.
    private func record(_ message: DeliveredMessage) async {
        do {
            try await delivered.append(message)
            deliveredRecorded += 1
            if deliveredRecorded > 2 * acknowledged.count + 1_000 {
                let remembered = acknowledged.remembered()
                try await delivered.replace(with: remembered)
                deliveredRecorded = remembered.count
            }
        } catch {
            logger.warning("session_delivered_store_failed", metadata: ["error": "\(error)"])
        }
    }

    /// Pings an idle socket; closes it when a ping goes unanswered.
    private func keepAlive(_ socket: WhisperConnection) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: configuration.pingInterval)
            if Task.isCancelled { return }
            do {
                _ = try await socket.request(Ping(), timeout: configuration.pingTimeout)
            } catch {
                logger.debug("session_ping_unanswered")
                // Dead: nothing would answer a closing handshake either.
                await socket.close(grace: .zero)
                return
            }
        }
    }

    /// Sends what the outbox holds, as soon as it is due.
    private func flush(on socket: WhisperConnection) async {
        guard let keys else { return }  // nothing to send without an identity
        while !Task.isCancelled {
            let token = credentials?.sessionToken ?? ""
            let me = credentials?.whisperId, signing = keys.signing
            // The directory head this client holds goes with every message, for the
            // recipient to compare with its own (split views are caught at the next message).
            let head = await api?.directory.head
            try? await outbox.flush(using: { outgoing in
                // Messages queued under an older session carry its token: the token is not
                // signed, so the message goes with the current one.
                var message = outgoing.message
                message.sessionToken = token
                // One that waited longer than the server's clock allows is signed again
                // with the time it is sent (same messageId, same ciphertext), and one made
                // with another head than the one held now is signed again with it.
                let now = Clock.millisecondsNow()
                let restamp = abs(now - message.timestamp) > Self.restampAfterMs
                let rehead = head != nil && message.fields.directoryHead != head
                if message.from == me, restamp || rehead {
                    if restamp { message.fields.timestamp = now }
                    if rehead { message.fields.directoryHead = head }
                    message.fields.sig = Data(CanonicalSigning.sign(message.fields.signedBytes(groupId: outgoing.groupId), with: signing)).base64EncodedString()
                }
                if let groupId = outgoing.groupId {
                    _ = try await socket.send(GroupSendMessage(sessionToken: token, .init(groupId: groupId, message: message.fields)))
                } else {
                    _ = try await socket.send(message)
                }
            }, settled: { messageId, state in await self.tell(.outgoing(messageId: messageId, state: state)) })
            // A socket that closed under the flush: the next one flushes.
            if await socket.closeCode != nil { return }
            let next = try? await outbox.nextAttemptAt()
            let now = Clock.millisecondsNow()
            if Task.isCancelled { return }
            await sleep(next.map { Duration.milliseconds(max(0, $0 - now)) } ?? .seconds(3_600), until: .flush)
        }
    }

    /// Checks the identity's own key directory entry when a check is due (the first
    /// sign-in, then every `monitorInterval`), while the socket lasts.
    private func monitor() async {
        guard let api, let keys else { return }
        while !Task.isCancelled {
            if let due = ownEntry.dueAt, due > .now {
                guard (try? await Task.sleep(until: due, clock: .continuous)) != nil else { return }
                continue
            }
            ownEntry.dueAt = .now + configuration.monitorInterval
            guard let credentials else { continue }
            let outcome: Result<Void, any Error>
            do {
                try await api.checkOwnEntry(whisperId: credentials.whisperId, keys: keys, sessionToken: credentials.sessionToken)
                outcome = .success(())
            } catch {
                outcome = .failure(error)
            }
            if let alert = ownEntry.checked(outcome, grace: configuration.ownEntryGrace) {
                tell(.directoryAlert(alert))
            }
        }
    }

    // MARK: - Waiting

    private func set(_ new: SessionState) {
        guard new != state else { return }
        state = new
        stateContinuation.yield(new)
        if case .connected = new {
            connectedWaiters.values.forEach { $0.resume() }
            connectedWaiters.removeAll()
        }
    }

    /// Waits until the session is connected, `timeout` at most (then
    /// ``WhisperClientError/timedOut``, for this caller alone).
    private func waitForConnection(timeout: Duration) async throws {
        if case .signedOut = state { throw WhisperClientError.notConnected }
        let number = nextWaiter
        nextWaiter += 1
        let deadline = Task { [weak self] in
            // Cancelled: the wait ended before its time.
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            await self?.timeOut(waiter: number)
        }
        defer { deadline.cancel() }
        try await withCheckedThrowingContinuation { connectedWaiters[number] = $0 }
    }

    private func timeOut(waiter number: Int) {
        connectedWaiters.removeValue(forKey: number)?.resume(throwing: WhisperClientError.timedOut)
    }

    private func failWaiters(_ error: any Error) {
        connectedWaiters.values.forEach { $0.resume(throwing: error) }
        connectedWaiters.removeAll()
    }

    /// What a sleep of the loop or of the flusher waits for besides its time.
    private enum Alarm { case backoff, flush }

    /// Sleeps `delay`, or less when `alarm` is rung (`wake`).
    private func sleep(_ delay: Duration, until alarm: Alarm) async {
        let timer = Task { [weak self] in
            try? await Task.sleep(for: delay)
            await self?.wake(alarm)
        }
        await withCheckedContinuation { alarms[alarm] = $0 }
        timer.cancel()
    }

    private func wake(_ alarm: Alarm) {
        alarms.removeValue(forKey: alarm)?.resume()
    }
}

/// The server ended the session for a reason the session object must not undo.
private struct SessionEnded: Error {
    var reason: SignOutReason
}

/// What the session's monitor remembers of its own directory entry
/// (docs/key-transparency.md, "What the SDK checks"): when the next check is due, and whether the entry was proven before,
/// so that the server cannot blind the monitor by no longer showing the entry to its
/// owner (lookups are authenticated: the server knows who asks).
struct OwnEntryWatch {
    /// When the next check is due; nil before the first.
    var dueAt: ContinuousClock.Instant?
    /// The entry was proven with the owner's keys at least once.
    private(set) var proven = false
    /// Since when checks of a proven entry have failed.
    private(set) var failingSince: ContinuousClock.Instant?
    /// `ownEntryHidden` was reported since the entry was last proven (it is reported once).
    private(set) var hiddenReported = false

    /// Takes a check's outcome; returns the alert for the app, if any.
    /// - a proof failure (`keysNotMine`, `badInclusionProof`, `staleHead`, ...): that alert;
    /// - after a proof: "waiting" or 404 at once, other failures past `grace`: `ownEntryHidden`;
    /// - before any proof, "waiting" is a new identity's first epoch still to come.
    mutating func checked(_ outcome: Result<Void, any Error>, grace: Duration, now: ContinuousClock.Instant = .now) -> KeyTransparencyError? {
        let error: any Error
        switch outcome {
        case .success:
            proven = true
            failingSince = nil
            hiddenReported = false
            return nil
        case .failure(let failure):
            error = failure
        }
        if let problem = error as? KeyTransparencyError, problem != .notYetPublished { return problem }
        guard proven else { return nil }
        let since = failingSince ?? now
        failingSince = since
        let withheld: Bool = switch error {
        case KeyTransparencyError.notYetPublished, WhisperAPIError.refused(404, _, _): true
        default: now - since >= grace
        }
        guard withheld, !hiddenReported else { return nil }
        hiddenReported = true
        return .ownEntryHidden
    }
}

import Foundation
import Logging
import NIOCore
import NIOWebSocket
import Prometheus
import Synchronization
import WhisperShared

/// One client's WebSocket on this gateway instance.
public final class ClientConnection: Sendable {
    /// Unique per connection (`connId` in logs and presence records, always beside the
    /// instance's ID): `RandomID.short`, held inside the string, so no allocation.
    public let id: String
    /// The client's address as the limits key it (`ClientAddress`).
    let remoteAddress: String
    /// The socket's channel: frames are written to it directly, by whoever has one for
    /// this client (a router's answer arriving over pub/sub, a reply of the frame
    /// handler), in the order they are handed over. No queue or writer task in between:
    /// each hop through one would cost a task switch per frame.
    let channel: any Channel
    /// What every socket of the gateway shares (`Terms`): one reference per socket.
    let terms: Terms
    /// Frames read from the socket and not handled yet (`SocketInbox`).
    let inbox: SocketInbox
    /// The socket's messages let past their turn and waiting for their stores (`SocketTurns`).
    let turns = SocketTurns()
    /// The listener device of the upgrade's `whisper_live_device` cookie (`LiveDevices`),
    /// for live text: a listener's frames act for it. Nil without a valid cookie.
    let liveDevice: String?
    /// The identity this socket acts for, once a session was used or created on it.
    private let binding = Mutex<String?>(nil)
    /// The token last found live for this socket, trusted for a few seconds so that a
    /// busy socket does not cost a Redis lookup per frame. Dropped whenever the session
    /// may have changed through this socket (refresh, logout) or was ended elsewhere
    /// (revoke, supersede: both unbind). A busy socket's token is looked up again in its
    /// last `renewAhead` of trust, beside its frames (`trusts`), so that its frames do not
    /// wait for the lookup; `renewing` marks that lookup in flight.
    private let verified = Mutex<(token: String, until: ContinuousClock.Instant, renewing: Bool)?>(nil)
    static let verifiedFor: Duration = .seconds(5)
    static let renewAhead: Duration = .seconds(1)
    /// Frames and bytes handed over since the socket last had room in its send buffer
    /// (NIO's writability: more than 64 KiB unsent). A client that stops reading is
    /// dropped after `unsentLimit` frames or `Terms.maxUnsentBytes` bytes, whichever
    /// comes first, rather than have its frames held without bound.
    private let unsentFrames = Atomic<Int>(0)
    private let unsentBytes = Atomic<Int>(0)
    /// The identities this socket watches the presence of (`presence_subscribe`).
    private let watched = Mutex<[String]>([])
    /// Set once a close was asked for: nothing is written after it.
    private let closing = Atomic<Bool>(false)
    /// Set when the server ends the socket (revoked, displaced, too many refusals, too
    /// slow): frames it sent and the gateway has not handled yet are dropped. A socket
    /// the client closes keeps the frames it sent before its close (its last receipts).
    private let refusing = Atomic<Bool>(false)
    /// This socket's share of the limits on frames that do no other work and on refused
    /// frames (`GatewaySettings.controlPerSocket`, `refusalsPerSocket`).
    private let buckets: Mutex<(control: LocalBucket, refusals: LocalBucket)>

    /// Tokens this socket took ahead from its identity's buckets in Redis for messages
    /// and receipts (`TokenLease`); dropped when it stops acting for the identity, which
    /// also starts a new `binding` generation, so that a lease asked ahead for the
    /// identity before never lands on the socket's next one.
    private let leases = Mutex<Leases>(Leases())

    private struct Leases {
        var generation = 0
        var byKind: [TokenLease.Kind: TokenLease] = [:]
    }

    /// Frames a socket may be handed while it has no room before it counts as too slow.
    static let unsentLimit = 4_096

    /// What the sockets of a gateway share, made once: a copy in each socket would cost
    /// every idle socket its own.
    final class Terms: Sendable {
        /// The gateway's logger; `ClientConnection.logger` adds the socket's `connId`
        /// when something is logged.
        let logger: Logger
        let controlLimit: RateLimitRule
        let refusalLimit: RateLimitRule
        let maxUnsentBytes: Int
        let inbox: SocketInbox.Bounds

        init(
            logger: Logger, controlLimit: RateLimitRule, refusalLimit: RateLimitRule,
            maxUnsentBytes: Int = 8 * 1_048_576, inbox: SocketInbox.Bounds = .standard
        ) {
            self.logger = logger
            self.controlLimit = controlLimit
            self.refusalLimit = refusalLimit
            self.maxUnsentBytes = maxUnsentBytes
            self.inbox = inbox
        }
    }

    init(channel: any Channel, remoteAddress: String, terms: Terms, liveDevice: String? = nil) {
        self.liveDevice = liveDevice
        self.terms = terms
        self.id = RandomID.short()
        self.buckets = Mutex((LocalBucket(full: terms.controlLimit), LocalBucket(full: terms.refusalLimit)))
        self.inbox = SocketInbox(bounds: terms.inbox)
        self.channel = channel
        self.remoteAddress = remoteAddress
    }

    /// The gateway's logger with this socket's `connId`.
    var logger: Logger {
        var logger = terms.logger
        logger[metadataKey: "connId"] = .string(id)
        return logger
    }

    var whisperId: String? { binding.withLock { $0 } }

    /// Binds the socket to an identity; returns false when it is bound to another one.
    func bind(to whisperId: String) -> (accepted: Bool, isNew: Bool) {
        binding.withLock { current in
            if let current { return (current == whisperId, false) }
            current = whisperId
            return (true, true)
        }
    }

    /// Spends a token leased for `kind`; `spent` false when none is left: lease more.
    /// With a token spent, `ahead` is the size of a lease to ask for now, ahead of need
    /// (`TokenLease.leaseAhead`), the generation to hand back with its answer, and the
    /// promise to complete once it is in (`leasedAhead`).
    func spendLeased(
        _ kind: TokenLease.Kind, now: UInt64, max: Int
    ) -> (spent: Bool, ahead: (size: Int, generation: Int, answered: EventLoopPromise<Void>)?) {
        leases.withLock { leases in
            guard leases.byKind[kind, default: TokenLease()].spend(now: now) else { return (false, nil) }
            guard let ahead = leases.byKind[kind]?.leaseAhead(now: now, max: max, on: channel.eventLoop) else { return (true, nil) }
            return (true, (ahead.size, leases.generation, ahead.answered))
        }
    }

    /// The answer of the lease asked ahead for `kind`, while it is not in.
    func leaseAheadInFlight(_ kind: TokenLease.Kind) -> EventLoopFuture<Void>? {
        leases.withLock { $0.byKind[kind]?.aheadAnswer }
    }

    /// How many tokens to lease for `kind` now (at most `max`).
    func leaseSize(_ kind: TokenLease.Kind, now: UInt64, max: Int) -> Int {
        leases.withLock { $0.byKind[kind, default: TokenLease()].nextSize(now: now, max: max) }
    }

    /// A lease came back with `granted` tokens, one of them spent at once.
    func leased(_ kind: TokenLease.Kind, granted: Int, now: UInt64) {
        leases.withLock { $0.byKind[kind, default: TokenLease()].received(granted, now: now) }
    }

    /// A lease asked ahead answered (nil: refused or failed); dropped when the socket
    /// stopped acting for the identity since it was asked (`generation`).
    func leasedAhead(_ kind: TokenLease.Kind, granted: Int?, generation: Int, now: UInt64) {
        leases.withLock { leases in
            guard leases.generation == generation else { return }
            leases.byKind[kind]?.receivedAhead(granted, now: now)
        }
    }

    func unbind() -> String? {
        forgetVerifiedSession()
        leases.withLock { leases in
            leases.generation += 1
            leases.byKind.removeAll()
        }
        return binding.withLock { current in
            defer { current = nil }
            return current
        }
    }

    /// Sets the identities this socket watches; returns the ones it watched before.
    func replaceWatched(with whisperIds: [String]) -> [String] {
        watched.withLock { current in
            defer { current = whisperIds }
            return current
        }
    }

    /// Takes a token from this socket's bucket of `ping`, `session_refresh` and `logout`.
    func takeControl() -> Bool { buckets.withLock { $0.control.take(terms.controlLimit) } }

    /// Takes a token from this socket's bucket of refused frames.
    func takeRefusal() -> Bool { buckets.withLock { $0.refusals.take(terms.refusalLimit) } }

    var isClosing: Bool { closing.load(ordering: .relaxed) }

    /// The server ended this socket: what it sent and is still queued is not handled.
    var refusesFrames: Bool { refusing.load(ordering: .relaxed) }

    func hasVerified(_ token: String) -> Bool {
        verified.withLock { entry in
            guard let current = entry, current.token == token, ContinuousClock.now < current.until else { return false }
            return true
        }
    }

    /// Whether `token` is trusted now; and, in its last `renewAhead`, once, that the
    /// caller is to look it up again now and answer with `renewed`.
    func trusts(_ token: String, now: ContinuousClock.Instant = .now) -> (trusted: Bool, renew: Bool) {
        verified.withLock { entry in
            guard var current = entry, current.token == token, now < current.until else { return (false, false) }
            guard !current.renewing, current.until - now < Self.renewAhead else { return (true, false) }
            current.renewing = true
            entry = current
            return (true, true)
        }
    }

    /// The lookup `trusts` asked for answered: the session is live (`true`: trusted for
    /// `verifiedFor` more), gone (`false`: no longer trusted), or unknown (nil: Redis
    /// failed; trusted until its lapse). Dropped when the token was let go meanwhile.
    func renewed(_ token: String, live: Bool?, now: ContinuousClock.Instant = .now) {
        verified.withLock { entry in
            guard let current = entry, current.token == token, current.renewing else { return }
            switch live {
            case true?: entry = (token, now + Self.verifiedFor, false)
            case false?: entry = nil
            case nil: entry = (token, current.until, false)
            }
        }
    }

    /// Lets go of a token whose trust lapsed (the socket's periodic look, `SocketHandler`):
    /// an idle socket then holds no copy of it.
    func forgetLapsedTrust(now: ContinuousClock.Instant = .now) {
        verified.withLock { entry in
            if let current = entry, now >= current.until { entry = nil }
        }
    }

    /// Whether a token is held as verified (for tests).
    var holdsVerifiedToken: Bool { verified.withLock { $0 != nil } }

    func rememberVerified(_ token: String) {
        verified.withLock { $0 = (token, ContinuousClock.now + Self.verifiedFor, false) }
    }

    func forgetVerifiedSession() {
        verified.withLock { $0 = nil }
    }

    func send<P: ServerPayload>(_ payload: P, requestId: String? = nil) {
        sendRaw(ServerFrameCodec.encode(payload, requestId: requestId))
    }

    /// Writes a complete frame (JSON this server wrote, so valid UTF-8: a text frame
    /// straight from the bytes) to this socket. `onWritten` runs once the socket has
    /// taken the frame (written to the connection), never when it was dropped.
    func sendRaw(_ bytes: [UInt8], onWritten: (@Sendable () -> Void)? = nil) {
        guard !closing.load(ordering: .relaxed) else { return }
        if channel.isWritable {
            unsentFrames.store(0, ordering: .relaxed)
            unsentBytes.store(0, ordering: .relaxed)
        } else if unsentFrames.add(1, ordering: .relaxed).newValue > Self.unsentLimit
                    || unsentBytes.add(bytes.count, ordering: .relaxed).newValue > terms.maxUnsentBytes {
            // The client does not read: drop the socket rather than hold its frames
            // without bound. No close handshake: a close frame would wait behind the
            // frames it does not read. What it missed stays in its pending queue.
            guard closing.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
            refusing.store(true, ordering: .relaxed)
            logger.warning("socket_too_slow", metadata: [
                "unsentFrames": "\(unsentFrames.load(ordering: .relaxed))", "unsentBytes": "\(unsentBytes.load(ordering: .relaxed))",
            ])
            channel.close(promise: nil)
            return
        }
        let frame = WebSocketWire.serverFrame(.text, bytes, allocator: channel.allocator)
        guard let onWritten else {
            channel.writeAndFlush(frame, promise: nil)
            return
        }
        let promise = channel.eventLoop.makePromise(of: Void.self)
        promise.futureResult.whenSuccess { onWritten() }
        channel.writeAndFlush(frame, promise: promise)
    }

    /// Writes a frame only when the socket has room for it now, and reports whether the
    /// socket took it (handed to the connection) within `limit`: `false` when it was
    /// closing, had frames waiting, or did not take it in time (the frame may still go
    /// out later). A caller that must not lose the frame stores it on `false`.
    func sendConfirmed(_ bytes: [UInt8], within limit: TimeAmount) async -> Bool {
        guard !closing.load(ordering: .relaxed), channel.isWritable else { return false }
        let frame = WebSocketWire.serverFrame(.text, bytes, allocator: channel.allocator)
        let loop = channel.eventLoop
        let written = loop.makePromise(of: Void.self)
        if loop.inEventLoop {
            // On the socket's own loop the write and its flush run inline: a socket with
            // room takes the frame before `writeAndFlush` returns, and the answer needs
            // no timer. Only a frame left waiting falls through to the timed wait.
            if let taken = writeOnLoop(frame, promise: written) { return taken }
        } else {
            channel.writeAndFlush(frame, promise: written)
        }
        return await timedAnswer(written, within: limit)
    }

    /// Writes on the channel's own event loop; returns whether the socket took the
    /// frame when that was known before the write returned, else nil.
    private func writeOnLoop(_ frame: ByteBuffer, promise written: EventLoopPromise<Void>) -> Bool? {
        let inline = InlineWrite()
        written.futureResult.assumeIsolated().whenComplete { result in
            if case .success = result { inline.taken = true } else { inline.taken = false }
        }
        channel.writeAndFlush(frame, promise: written)
        return inline.taken
    }

    /// Whether `written` succeeds within `limit` (false when it fails or is late).
    private func timedAnswer(_ written: EventLoopPromise<Void>, within limit: TimeAmount) async -> Bool {
        let loop = written.futureResult.eventLoop
        let answer = loop.makePromise(of: Bool.self)
        // Whichever comes first answers; the other finds the answer given (a promise
        // may be completed once only).
        let once = FirstAnswer()
        let deadline = loop.scheduleTask(in: limit) {
            if once.claim() { answer.succeed(false) }
        }
        written.futureResult.whenComplete { result in
            deadline.cancel()
            guard once.claim() else { return }
            if case .success = result { answer.succeed(true) } else { answer.succeed(false) }
        }
        return (try? await answer.futureResult.get()) ?? false
    }

    /// Closes the socket with this code, after the frames already written; nothing is
    /// written after it. Callable from any thread without waiting: the socket's own
    /// handler (`SocketHandler`, on its event loop) sends the close frame and closes the
    /// connection when the client answers or the close timeout passes.
    func close(code: UInt16, reason: String) {
        refusing.store(true, ordering: .relaxed)
        guard closing.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        channel.pipeline.fireUserInboundEventTriggered(SocketHandler.CloseRequest(code: code, reason: reason))
    }

    /// The socket is closing for a reason of its own (the client's close frame, a
    /// protocol error, a ping timeout): nothing more is written to it.
    func markClosing() {
        closing.store(true, ordering: .relaxed)
    }
}

/// WebSocket close codes the gateway uses besides the standard ones.
enum CloseCode {
    /// The session ended (`session_revoked` came just before): do not reconnect with it.
    static let sessionRevoked: UInt16 = 4001
    /// The same session now uses a newer socket; this one is no longer needed.
    static let superseded: UInt16 = 4002
    /// Too many refused frames (malformed, without a live session, over a limit).
    static let tooManyRefusals: UInt16 = 4003
    /// No session (registration or session token) within the deadline after the upgrade.
    static let authenticationTimeout: UInt16 = 4004
    /// The instance is shutting down (after `reconnect`, for sockets still open).
    static let goingAway: UInt16 = 1001
}

/// What an inline write's promise said, read on the same event loop right after the
/// write (nil: not completed yet).
private final class InlineWrite {
    var taken: Bool?
}

/// Lets the first of two racing callbacks act, once.
private final class FirstAnswer: Sendable {
    private let given = Atomic<Bool>(false)

    func claim() -> Bool {
        !given.exchange(true, ordering: .relaxed)
    }
}

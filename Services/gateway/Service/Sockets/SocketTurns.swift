import Synchronization

/// A socket's frames are handled one at a time, in the order read, except for a
/// `send_message` delivered while it is stored: once its store is written to Redis (on
/// the client's one connection, which keeps the order of writes) the socket's next frame
/// is handled while the store's answer is awaited, so that one slow fsync does not hold
/// every later message of the socket. At most `storesInFlightMax` of a socket's messages
/// wait for their stores at once; the socket's end waits for them (`drained`).
/// docs/architecture.md, "A socket's messages in flight".
final class SocketTurns: Sendable {
    /// A socket's messages past their turn and waiting for their stores, at most.
    static let storesInFlightMax = 8

    private struct State {
        var inFlight = 0
        /// A frame waiting for room, and the socket's end waiting for none in flight:
        /// only the socket's one handling task waits here, so one of each at most.
        var room: CheckedContinuation<Void, Never>?
        var drained: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    /// Waits until fewer than `storesInFlightMax` messages are in flight, then gives the
    /// next frame its turn.
    func begin() async -> FrameTurn {
        let full = state.withLock { $0.inFlight >= Self.storesInFlightMax }
        if full {
            await withCheckedContinuation { continuation in
                let now = state.withLock { state in
                    guard state.inFlight >= Self.storesInFlightMax else { return true }
                    state.room = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        }
        return FrameTurn(turns: self)
    }

    /// Returns once no message of the socket waits for its store.
    func drained() async {
        guard state.withLock({ $0.inFlight > 0 }) else { return }
        await withCheckedContinuation { continuation in
            let now = state.withLock { state in
                guard state.inFlight > 0 else { return true }
                state.drained = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// How many of the socket's messages wait for their stores now.
    var inFlight: Int { state.withLock { $0.inFlight } }

    fileprivate func released() {
        state.withLock { $0.inFlight += 1 }
    }

    fileprivate func ended() {
        let (room, drained) = state.withLock { state -> (CheckedContinuation<Void, Never>?, CheckedContinuation<Void, Never>?) in
            state.inFlight -= 1
            var room: CheckedContinuation<Void, Never>?
            if state.inFlight < Self.storesInFlightMax { swap(&room, &state.room) }
            var drained: CheckedContinuation<Void, Never>?
            if state.inFlight == 0 { swap(&drained, &state.drained) }
            return (room, drained)
        }
        room?.resume()
        drained?.resume()
    }
}

/// One frame's turn on its socket: the socket's next frame waits until this one ended,
/// or until it was let go past its turn (`release`, a message whose store is written).
final class FrameTurn: Sendable {
    private enum Phase {
        case running(waiter: CheckedContinuation<Void, Never>?)
        case released
        case ended
    }

    private let turns: SocketTurns
    private let phase = Mutex(Phase.running(waiter: nil))

    fileprivate init(turns: SocketTurns) {
        self.turns = turns
    }

    /// The frame no longer holds the socket: its next frame may be handled now. Only the
    /// first call counts.
    func release() {
        let waiter = phase.withLock { phase -> CheckedContinuation<Void, Never>?? in
            guard case .running(let waiter) = phase else { return nil }
            phase = .released
            return .some(waiter)
        }
        guard let waiter else { return }
        turns.released()
        waiter?.resume()
    }

    /// The frame is done with.
    func end() {
        let (wasReleased, waiter) = phase.withLock { phase -> (Bool, CheckedContinuation<Void, Never>?) in
            defer { phase = .ended }
            switch phase {
            case .running(let waiter): return (false, waiter)
            case .released: return (true, nil)
            case .ended: return (false, nil)
            }
        }
        if wasReleased { turns.ended() }
        waiter?.resume()
    }

    /// Returns once the frame ended or was released; at once when it already was.
    func passed() async {
        guard phase.withLock({ if case .running = $0 { true } else { false } }) else { return }
        await withCheckedContinuation { continuation in
            let now = phase.withLock { phase in
                guard case .running = phase else { return true }
                phase = .running(waiter: continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}

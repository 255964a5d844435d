import Synchronization

/// A socket's frames are handled one at a time in order, except that a `send_message`
/// delivered while stored hands the socket over once its store is written, so one slow
/// fsync does not hold the next messages; at most `storesInFlightMax` wait at once
/// (docs/architecture.md, "A socket's messages in flight").
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

    /// Waits until fewer than `storesInFlightMax` messages are in flight.
    func waitForRoom() async {
        await wait(while: { $0.inFlight >= Self.storesInFlightMax }, in: \.room)
    }

    /// Returns once no message of the socket waits for its store.
    func drained() async {
        await wait(while: { $0.inFlight > 0 }, in: \.drained)
    }

    /// Waits while `blocked` holds, parked in `slot` until `ended` resumes it.
    private func wait(while blocked: (State) -> Bool, in slot: WritableKeyPath<State, CheckedContinuation<Void, Never>?>) async {
        guard state.withLock({ blocked($0) }) else { return }
        await withCheckedContinuation { continuation in
            let parked = state.withLock { state in
                guard blocked(state) else { return false }
                state[keyPath: slot] = continuation
                return true
            }
            if !parked { continuation.resume() }
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

/// A `send_message`'s turn on its socket: the socket's next frame waits until the
/// message is done with, or until it handed the socket over (`release`, once its store is
/// written).
final class FrameTurn: Sendable {
    private let turns: SocketTurns
    /// Lets another task handle the socket's next frames (`SocketHandler`).
    private let handOver: @Sendable () -> Void
    /// 0 holding the socket, 1 released, 2 done.
    private let phase = Atomic<Int>(0)

    init(turns: SocketTurns, handOver: @escaping @Sendable () -> Void) {
        self.turns = turns
        self.handOver = handOver
    }

    /// The message no longer holds its socket: the next frame may be handled now, by
    /// another task. Only the first call counts.
    func release() {
        guard phase.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged else { return }
        turns.released()
        handOver()
    }

    /// The message is done with; true when it had handed its socket over (then the task
    /// that handled it stops: another one has the socket).
    func end() -> Bool {
        let was = phase.exchange(2, ordering: .acquiringAndReleasing)
        if was == 1 { turns.ended() }
        return was == 1
    }
}

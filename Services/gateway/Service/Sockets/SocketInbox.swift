import NIOCore
import Synchronization

/// Messages one socket has read and the gateway has not handled yet. They are handled
/// one at a time, in the order they arrived, by a task that exists only while there is
/// something to handle. Past `Bounds` the socket is no longer read (TCP then holds the
/// client back) until the queue is down to `resumeAtMessages`.
final class SocketInbox: Sendable {
    /// Shared by the sockets of a gateway (a reference in each, not a copy).
    final class Bounds: Sendable {
        let pauseAtMessages: Int
        let pauseAtBytes: Int
        let resumeAtMessages: Int

        init(pauseAtMessages: Int, pauseAtBytes: Int, resumeAtMessages: Int) {
            self.pauseAtMessages = pauseAtMessages
            self.pauseAtBytes = pauseAtBytes
            self.resumeAtMessages = resumeAtMessages
        }

        /// 16 messages or 1 MiB queued pause reading; 4 left resume it.
        static let standard = Bounds(pauseAtMessages: 16, pauseAtBytes: 1_048_576, resumeAtMessages: 4)
    }

    enum Next {
        case message([UInt8], resumeReading: Bool)
        /// Nothing queued: the handling task ends.
        case idle
        /// The socket closed and everything it sent was handled.
        case ended
    }

    private struct State {
        /// Each message with when it was read (`NIODeadline` uptime, ns).
        var messages: [(bytes: [UInt8], arrivedAt: UInt64)] = []
        var head = 0
        var bytes = 0
        var handling = false
        var closed = false
        var finished = false
        var paused = false
        /// The head message starts a handling run: it was read while nothing was handled.
        var runStarts = false

        var count: Int { messages.count - head }
    }

    let bounds: Bounds
    private let state = Mutex(State())

    init(bounds: Bounds) {
        self.bounds = bounds
    }

    /// Queues a message; says whether a handling task must start and whether reading
    /// must pause.
    func push(_ message: [UInt8]) -> (startHandling: Bool, pauseReading: Bool) {
        state.withLock { state in
            state.messages.append((message, NIODeadline.now().uptimeNanoseconds))
            state.bytes += message.count
            let start = !state.handling
            state.handling = true
            if start { state.runStarts = true }
            let pause = !state.paused && (state.count >= bounds.pauseAtMessages || state.bytes >= bounds.pauseAtBytes)
            if pause { state.paused = true }
            return (start, pause)
        }
    }

    /// The handling task lets the socket go before its message is done with: true when
    /// something is queued (or the close is to be finished), for a new task to handle; else
    /// the next message read starts one.
    func handOver() -> Bool {
        state.withLock { state in
            if state.count > 0 || (state.closed && !state.finished) { return true }
            state.handling = false
            return false
        }
    }

    /// The socket closed; true when a task must start to finish it.
    func end() -> Bool {
        state.withLock { state in
            state.closed = true
            let start = !state.handling
            state.handling = true
            return start
        }
    }

    /// The next step of the handling task.
    func next() -> Next { nextTimed().next }

    /// The next step, and for a message since when it has waited for the gateway
    /// (`NIODeadline` uptime, ns), so that a frame the gateway kept waiting too long can
    /// be turned away. Only a run's first message has waited for the gateway: it was read
    /// while nothing of its socket was being handled, and waited from then until a task
    /// came to it. A message queued behind its socket's earlier ones waited for them, a
    /// backlog of the socket's own making that TCP holds back (the socket is not read past
    /// `Bounds`): for it, and for anything that is not a message, 0.
    func nextTimed() -> (next: Next, waitingSince: UInt64) {
        state.withLock { state in
            if state.count > 0 {
                let (message, arrivedAt) = state.messages[state.head]
                let waitingSince = state.runStarts ? arrivedAt : 0
                state.runStarts = false
                state.messages[state.head] = ([], 0)
                state.head += 1
                state.bytes -= message.count
                if state.count == 0 {
                    state.messages.removeAll(keepingCapacity: false)
                    state.head = 0
                } else if state.head >= 64 {
                    state.messages.removeFirst(state.head)
                    state.head = 0
                }
                let resume = state.paused && state.count <= bounds.resumeAtMessages && state.bytes < bounds.pauseAtBytes
                if resume { state.paused = false }
                return (.message(message, resumeReading: resume), waitingSince)
            }
            if state.closed, !state.finished {
                state.finished = true
                return (.ended, 0)
            }
            state.handling = false
            return (.idle, 0)
        }
    }

    var isPaused: Bool { state.withLock { $0.paused } }

    var queued: Int { state.withLock { $0.count } }
}

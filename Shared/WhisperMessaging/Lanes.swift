import NIOCore
import Synchronization

/// What a consumer handles in a lane: stream entries with the same `lane` are handled
/// one after another, in the order they were added; different lanes at once.
public protocol LaneItem: Sendable {
    var id: String { get }
    var lane: String { get }
}

/// The stream entries a consumer is handling (`StreamGroupReader`): a queue per lane,
/// how many are in flight (reading waits while `limit` are), which are finished and wait
/// to be acknowledged, and which are ours while a claim looks for abandoned ones. The
/// router's lanes are its senders (one sender's frames in order); push-sender's are its
/// jobs (each on its own).
public final class Lanes<Element: LaneItem>: Sendable {
    public typealias Item = Element

    private struct State {
        var queues: [String: CircularBuffer<Item>] = [:]
        /// IDs read and not yet finished or abandoned.
        var handling: Set<String> = []
        var finished: [String] = []
        var roomWaiter: CheckedContinuation<Void, Never>?
    }

    public let limit: Int
    private let state = Mutex(State())
    /// Ticks when something finished: the acknowledging task wakes and takes all there is.
    public let acknowledgements: AsyncStream<Void>
    private let tick: AsyncStream<Void>.Continuation

    public init(limit: Int) {
        self.limit = limit
        (acknowledgements, tick) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// How many more entries may be read now.
    public var room: Int { max(1, limit - state.withLock { $0.handling.count }) }

    /// Returns at once while there is room, else when there is.
    public func waitForRoom() async {
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { state in
                if state.handling.count < limit { return true }
                state.roomWaiter = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// Queues an entry behind its sender's; true when the sender had no lane running,
    /// so the caller starts one.
    public func add(_ item: Item) -> Bool {
        state.withLock { state in
            guard state.handling.insert(item.id).inserted else { return false }
            if state.queues[item.lane] != nil {
                state.queues[item.lane]?.append(item)
                return false
            }
            var queue = CircularBuffer<Item>(initialCapacity: 4)
            queue.append(item)
            state.queues[item.lane] = queue
            return true
        }
    }

    /// The sender's next entry; nil ends the lane (and removes it, atomically with the check).
    public func next(for sender: String) -> Item? {
        state.withLock { state in
            guard let item = state.queues[sender]?.first else {
                state.queues[sender] = nil
                return nil
            }
            return item
        }
    }

    /// The lane's first entry is done: it leaves the lane and waits for its XACK.
    public func finished(_ item: Item) {
        finish(item.id) { state in
            if state.queues[item.lane]?.first?.id == item.id {
                _ = state.queues[item.lane]?.removeFirst()
            }
        }
    }

    /// An entry that never joined a lane (unreadable) is acknowledged all the same.
    public func finished(unreadable id: String) {
        finish(id) { _ in }
    }

    private func finish(_ id: String, _ update: (inout State) -> Void) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.finished.append(id)
            state.handling.remove(id)
            update(&state)
            return takeWaiterIfRoom(&state)
        }
        tick.yield()
        waiter?.resume()
    }

    /// The lane failed at its first entry: it and the rest of the lane stay unacknowledged.
    public func abandon(_ sender: String) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            for left in state.queues[sender] ?? [] { state.handling.remove(left.id) }
            state.queues[sender] = nil
            return takeWaiterIfRoom(&state)
        }
        waiter?.resume()
    }

    /// Whether the reader is parked in `waitForRoom`.
    public var isWaitingForRoom: Bool { state.withLock { $0.roomWaiter != nil } }

    public func isHandling(_ id: String) -> Bool {
        state.withLock { $0.handling.contains(id) }
    }

    /// Finished entries whose acknowledgement failed go back, to be acknowledged first
    /// next time (not handled a second time once Redis is back).
    public func restore(_ ids: [String]) {
        state.withLock { $0.finished.insert(contentsOf: ids, at: 0) }
    }

    public func takeFinished() -> [String] {
        state.withLock { state in
            defer { state.finished.removeAll(keepingCapacity: true) }
            return state.finished
        }
    }

    private func takeWaiterIfRoom(_ state: inout State) -> CheckedContinuation<Void, Never>? {
        guard state.handling.count < limit, let waiter = state.roomWaiter else { return nil }
        state.roomWaiter = nil
        return waiter
    }
}

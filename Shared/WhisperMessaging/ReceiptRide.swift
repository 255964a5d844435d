import Synchronization

/// A `delivered` receipt's seat in the store of the message it acknowledges, for a
/// message delivered while it is stored (docs/architecture.md, "Delivered while it is
/// stored"): a receipt that comes before the store's write leaves for Redis goes into
/// that store (`join`), and the message is recorded as delivered instead of queued. The
/// write takes its decision as it leaves (`seal`): after that nothing joins.
public final class ReceiptRide: Sendable {
    private enum State {
        case open
        case joined(timestamp: Int64)
        case sealed(timestamp: Int64?)
    }

    private let state = Mutex(State.open)

    public init() {}

    /// Puts the receipt (its `timestamp`) in the store: true when it joined; false when
    /// the store already left or another receipt joined first.
    public func join(timestamp: Int64) -> Bool {
        state.withLock { state in
            guard case .open = state else { return false }
            state = .joined(timestamp: timestamp)
            return true
        }
    }

    /// The store leaves now: the timestamp of the receipt that joined it, or nil. Later
    /// calls give the same answer.
    public func seal() -> Int64? {
        state.withLock { state in
            switch state {
            case .open:
                state = .sealed(timestamp: nil)
                return nil
            case .joined(let timestamp):
                state = .sealed(timestamp: timestamp)
                return timestamp
            case .sealed(let timestamp):
                return timestamp
            }
        }
    }
}

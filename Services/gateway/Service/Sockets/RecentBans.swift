import Logging
import Prometheus
import ServiceLifecycle
import Synchronization
import Tracing
import WhisperMessaging
import WhisperShared

/// Identities banned in the last `window`, as this instance heard (`IdentityChange`):
/// a socket whose session was looked up just before the ban and that binds just after
/// the change arrived is refused here, so no socket of a banned identity stays open.
/// Bounded: the oldest entries go first past `capacity`.
final class RecentBans: Sendable {
    private let entries = Mutex<[String: ContinuousClock.Instant]>([:])
    let window: Duration
    let capacity: Int

    init(window: Duration = .seconds(600), capacity: Int = 10_000) {
        self.window = window
        self.capacity = capacity
    }

    func insert(_ whisperId: String) {
        let now = ContinuousClock.now
        entries.withLock { entries in
            if entries.count >= capacity {
                entries = entries.filter { now - $0.value < window }
                if entries.count >= capacity, let oldest = entries.min(by: { $0.value < $1.value })?.key { entries[oldest] = nil }
            }
            entries[whisperId] = now
        }
    }

    /// Forgets every ban heard: after the change channel was (re)subscribed, since a
    /// lifting published meanwhile was missed. A ban missed meanwhile needs no entry
    /// here: it revoked the session in Redis, so the socket's next session check (at most
    /// `ClientConnection.verifiedFor` later) refuses it.
    func removeAll() {
        entries.withLock { $0.removeAll() }
    }

    func remove(_ whisperId: String) {
        _ = entries.withLock { $0.removeValue(forKey: whisperId) }
    }

    func contains(_ whisperId: String) -> Bool {
        entries.withLock { entries in
            guard let at = entries[whisperId] else { return false }
            return ContinuousClock.now - at < window
        }
    }
}

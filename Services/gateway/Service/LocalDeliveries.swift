import Synchronization
import WhisperShared

/// Messages this gateway wrote to a recipient's socket, remembered for a short while
/// with the sender's socket: those it stored itself (the sender's socket is here) and
/// those another gateway stored and published here with their origin
/// (`DeliveryOrigin`: the sender's socket is there). A receipt for one of them, from
/// that recipient, needs no look-up in Redis: the gateway already knows the message is
/// the recipient's, who sent it and where the sender's socket was.
///
/// Each status is taken once (`delivered`, then `read`); a receipt that finds nothing
/// here (forgotten, a repeat, from another gateway) is looked up in Redis as before,
/// which is always right. What is remembered is bounded by count (the oldest go) and
/// by age, so a receipt that comes late is looked up too.
final class LocalDeliveries: Sendable {
    struct Delivery: Equatable {
        let sender: String
        /// The `ClientConnection.id` the sender's message was read from.
        let senderConnection: String
        /// The gateway holding that socket when it is not this one (the message came
        /// through its channel, `DeliveryOrigin`); nil for this instance's own socket.
        var senderGateway: String? = nil
    }

    private struct Entry {
        let delivery: Delivery
        var deliveredTaken = false
    }

    let lifetime: Duration
    private let table: Mutex<RecentTable<Entry>>

    /// 20,000 deliveries of at most about 250 bytes each (two Whisper IDs, a message
    /// and a connection ID): about 5 MB at most, whatever the load.
    static let standardCapacity = 20_000
    static let standardLifetime: Duration = .seconds(60)

    init(capacity: Int = standardCapacity, lifetime: Duration = standardLifetime) {
        table = Mutex(RecentTable(capacity: capacity))
        self.lifetime = lifetime
    }

    private static func key(_ recipient: String, _ messageId: String) -> String {
        recipient + "/" + Format.lowercased(messageId)
    }

    /// Called before the message is written to the recipient's socket, so its receipt
    /// cannot come first.
    func remember(recipient: String, messageId: String, sender: String, senderConnection: String, senderGateway: String? = nil) {
        let entry = Entry(delivery: Delivery(sender: sender, senderConnection: senderConnection, senderGateway: senderGateway))
        let until = ContinuousClock.now + lifetime
        table.withLock { $0.insert(entry, for: Self.key(recipient, messageId), until: until) }
    }

    /// The delivery a receipt of this status is for, once per status: `delivered` once,
    /// then `read` once (which forgets the message). Nil when not known here.
    func take(recipient: String, messageId: String, delivered: Bool) -> Delivery? {
        let key = Self.key(recipient, messageId)
        return table.withLock { table in
            guard var entry = table.value(for: key) else { return nil }
            if delivered {
                guard !entry.deliveredTaken else { return nil }
                entry.deliveredTaken = true
                table.update(entry, for: key)
            } else {
                table.remove(key)
            }
            return entry.delivery
        }
    }

    var count: Int { table.withLock { $0.count } }
}

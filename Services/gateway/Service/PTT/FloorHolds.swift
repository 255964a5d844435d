import Logging
import Synchronization
import WhisperShared

/// The floors this gateway's sockets hold or wait for (channel → the identity that
/// asked), to give them up when a socket goes, whether or not it still acts for anyone.
final class FloorHolds: Sendable {
    private let held = Mutex<[String: [String: String]]>([:])

    func hold(_ connId: String, _ channelId: String, for whisperId: String) {
        held.withLock { all in
            guard all[connId]?[channelId] != nil || (all[connId]?.count ?? 0) < Limits.MAX_PTT_CHANNELS_PER_IDENTITY else { return }
            all[connId, default: [:]][channelId] = whisperId
        }
    }

    func drop(_ connId: String, _ channelId: String) {
        held.withLock { all in
            all[connId]?[channelId] = nil
            if all[connId]?.isEmpty == true { all[connId] = nil }
        }
    }

    func dropAll(_ connId: String) -> [(channelId: String, whisperId: String)] {
        held.withLock { ($0.removeValue(forKey: connId) ?? [:]).map { ($0.key, $0.value) } }
    }
}

/// Takes back floors whose grant ran out, every quarter second.
enum FloorKeeper {
    static func periodic(desk: FloorDesk, logger: Logger) -> Periodic {
        Periodic(every: .milliseconds(250), waitingFirst: true, failure: "ptt_floor_sweep_failed", logger: logger) {
            try await desk.sweep()
            return nil
        }
    }
}

import Foundation
import Synchronization
import WhisperShared

/// The public push-to-talk channels announced nearby (docs/protocol.md section 14), held
/// in each gateway's memory and never in Redis's keyspace: neither the append-only file
/// nor a replica's copy keeps a history of the cells owners were in. An announcement
/// reaches every gateway as a pub/sub message on `ptt:nearby` (Redis writes `PUBLISH`
/// to no file and keeps nothing of it), and each keeps it until it lapses.
///
/// How stale it can be, and why that is safe: a message missed while a gateway's
/// subscription was down (or before it started) leaves its board short of a channel
/// until the owner's next heartbeat, 10 s later; a missed withdrawal leaves a channel
/// listed until its announcement lapses (`GATEWAY_PTT_ANNOUNCE_TTL_SECONDS`), the same
/// as an owner who stopped without saying so. Listing a public channel a little early
/// or late shows nothing that is not public.
///
/// Wire format: `<channelId> <cell> <untilMs>` (announced until then), or `<channelId>`
/// (no longer announced).
final class NearbyBoard: Sendable {
    static let channel = "ptt:nearby"
    /// Channels one cell holds (the most recently renewed), and cells the board holds.
    static let maxPerCell = 50
    static let maxCells = 100_000

    private struct State {
        /// cell → channel → when its announcement lapses (ms since 1970).
        var cells: [String: [String: Int64]] = [:]
        /// channel → the cell it is announced in.
        var cellOf: [String: String] = [:]
        var lastSweep: Int64 = 0
    }

    private let state = Mutex(State())
    /// The longest an announcement lasts; a message claiming longer is not believed.
    let ttl: Duration

    init(ttl: Duration) {
        self.ttl = ttl
    }

    static func encode(channelId: String, cell: String?, until: Int64) -> String {
        cell.map { "\(channelId) \($0) \(until)" } ?? channelId
    }

    /// A message from `ptt:nearby`; an unreadable one is dropped.
    func apply(_ payload: [UInt8], now: Int64 = Clock.millisecondsNow()) {
        guard payload.count <= 128 else { return }
        let parts = String(decoding: payload, as: UTF8.self).split(separator: " ").map(String.init)
        guard let channelId = parts.first, Format.isUUID(channelId) else { return }
        if parts.count == 1 {
            record(channelId, cell: nil, until: 0, now: now)
        } else if parts.count == 3, Geohash.isCell(parts[1]), let until = Int64(parts[2]), until <= now + 2 * Int64(ttl.milliseconds) {
            record(channelId, cell: parts[1], until: until, now: now)
        }
    }

    /// Puts a channel in `cell` until `until`, or takes it off the board (`cell` nil).
    func record(_ channelId: String, cell: String?, until: Int64, now: Int64 = Clock.millisecondsNow()) {
        state.withLock { state in
            if now - state.lastSweep > Int64(ttl.milliseconds) { Self.sweep(&state, now: now) }
            if let previous = state.cellOf[channelId], previous != cell {
                state.cells[previous]?[channelId] = nil
                if state.cells[previous]?.isEmpty == true { state.cells[previous] = nil }
                state.cellOf[channelId] = nil
            }
            guard let cell, until > now else { return }
            if state.cells[cell] == nil, state.cells.count >= Self.maxCells { return }
            state.cells[cell, default: [:]][channelId] = until
            state.cellOf[channelId] = cell
            if let listed = state.cells[cell], listed.count > Self.maxPerCell, let soonest = listed.min(by: { $0.value < $1.value })?.key {
                state.cells[cell]?[soonest] = nil
                state.cellOf[soonest] = nil
            }
        }
    }

    /// The channels announced in `cells` now, each once.
    func channels(in cells: [String], now: Int64 = Clock.millisecondsNow()) -> [String] {
        state.withLock { state in
            var ids: [String] = []
            for cell in cells {
                for (id, until) in state.cells[cell] ?? [:] where until > now && !ids.contains(id) { ids.append(id) }
            }
            return ids
        }
    }

    /// Drops lapsed announcements (at most once per announcement lifetime).
    private static func sweep(_ state: inout State, now: Int64) {
        state.lastSweep = now
        for (cell, listed) in state.cells {
            let live = listed.filter { $0.value > now }
            if live.isEmpty { state.cells[cell] = nil } else if live.count != listed.count { state.cells[cell] = live }
        }
        state.cellOf = state.cellOf.filter { state.cells[$0.value]?[$0.key] != nil }
    }
}

import Foundation
import Prometheus
import Synchronization
import WhisperShared

/// The public push-to-talk channels announced nearby (docs/protocol.md section 14), in
/// each gateway's memory only, so that no file or replica keeps where anyone was: an
/// announcement reaches every gateway on `ptt:nearby` and is kept until it lapses. Its
/// wire format, fair shares and staleness: docs/architecture.md, "In-process memories of
/// shared state". An owner is never logged.
final class NearbyBoard: Sendable {
    static let channel = "ptt:nearby"
    /// Channels one cell holds (the most recently renewed), and cells the board holds.
    static let maxPerCell = 50
    static let maxCells = 100_000
    /// Channels one identity may have announced in one cell, and in all cells together.
    static let maxPerOwnerInCell = 3
    static let maxPerOwner = 10

    /// Why an announcement is not on the board.
    enum Refusal: String, Sendable, CaseIterable {
        /// The owner already has `maxPerOwnerInCell` channels announced in this cell.
        case ownerInCell = "owner_in_cell"
        /// The owner already has `maxPerOwner` channels announced.
        case owner = "owner"
        /// The board holds `maxCells` cells, and this one is not among them.
        case boardFull = "board_full"

        var message: String {
            switch self {
            case .ownerInCell: "you already announce \(NearbyBoard.maxPerOwnerInCell) channels in this cell; stop one first"
            case .owner: "you already announce \(NearbyBoard.maxPerOwner) channels; stop one first"
            case .boardFull: "no more cells can be announced now; retry later"
            }
        }
    }

    private struct State {
        /// cell → channel → when its announcement lapses (ms since 1970).
        var cells: [String: [String: Int64]] = [:]
        /// channel → the cell it is announced in and its owner.
        var placed: [String: (cell: String, owner: String)] = [:]
        /// owner → how many of its channels are announced.
        var announcedBy: [String: Int] = [:]
        var lastSweep: Int64 = 0

        /// Takes a channel off the board.
        mutating func remove(_ channelId: String) {
            guard let (cell, owner) = placed.removeValue(forKey: channelId) else { return }
            cells[cell]?[channelId] = nil
            if cells[cell]?.isEmpty == true { cells[cell] = nil }
            let left = (announcedBy[owner] ?? 1) - 1
            announcedBy[owner] = left > 0 ? left : nil
        }
    }

    private let state = Mutex(State())
    /// The longest an announcement lasts; a message claiming longer is not believed.
    let ttl: Duration

    /// Announcements this gateway refused its owners, by reason; the cells on its board.
    private let refusedCounters: [Refusal: Counter]
    private let cellsGauge: Gauge?

    init(ttl: Duration, metrics: ServiceMetrics? = nil) {
        self.ttl = ttl
        let help = "Announcements of public push-to-talk channels this gateway refused their owners (ptt_announce answered RATE_LIMITED), by reason: owner_in_cell and owner (the identity's fair share), board_full (no new cell while the board holds 100,000)."
        var counters: [Refusal: Counter] = [:]
        if let metrics {
            for refusal in Refusal.allCases {
                counters[refusal] = metrics.counter("gateway_ptt_nearby_refused", help: help, labels: [("reason", refusal.rawValue)])
            }
        }
        refusedCounters = counters
        cellsGauge = metrics?.gauge("gateway_ptt_nearby_cells", help: "Cells with a public push-to-talk channel announced in them, on this gateway's board (at most 100,000).")
    }

    /// Counts a refusal told to an owner.
    func countRefused(_ refusal: Refusal) {
        refusedCounters[refusal]?.increment()
    }

    static func encode(channelId: String, cell: String?, until: Int64, owner: String) -> String {
        cell.map { "\(channelId) \($0) \(until) \(owner)" } ?? channelId
    }

    /// A message from `ptt:nearby`; an unreadable one is dropped.
    func apply(_ payload: [UInt8], now: Int64 = Clock.millisecondsNow()) {
        guard payload.count <= 128 else { return }
        let parts = String(decoding: payload, as: UTF8.self).split(separator: " ").map(String.init)
        guard let channelId = parts.first, Format.isUUID(channelId) else { return }
        if parts.count == 1 {
            _ = record(channelId, cell: nil, until: 0, owner: "", now: now)
        } else if parts.count == 4, Geohash.isCell(parts[1]), let until = Int64(parts[2]), until <= now + 2 * Int64(ttl.milliseconds),
                  Format.isWhisperID(parts[3]) {
            _ = record(channelId, cell: parts[1], until: until, owner: parts[3], now: now)
        }
    }

    /// Puts `owner`'s channel in `cell` until `until`, or takes it off the board (`cell`
    /// nil); a renewal in the same cell is always taken. Returns why it is not on the
    /// board, or nil.
    func record(_ channelId: String, cell: String?, until: Int64, owner: String, now: Int64 = Clock.millisecondsNow()) -> Refusal? {
        let (refusal, cells) = state.withLock { state -> (Refusal?, Int) in
            let refusal = Self.place(&state, channelId, cell: cell, until: until, owner: owner, now: now, ttl: ttl)
            return (refusal, state.cells.count)
        }
        cellsGauge?.set(Double(cells))
        return refusal
    }

    private static func place(_ state: inout State, _ channelId: String, cell: String?, until: Int64, owner: String, now: Int64, ttl: Duration) -> Refusal? {
        if now - state.lastSweep > Int64(ttl.milliseconds) { sweep(&state, now: now) }
        if let previous = state.placed[channelId], previous.cell != cell || previous.owner != owner {
            state.remove(channelId)
        }
        guard let cell, until > now else { return nil }
        if state.placed[channelId] == nil {
            if state.announcedBy[owner, default: 0] >= Self.maxPerOwner { return .owner }
            let inCell = state.cells[cell]?.keys.count(where: { state.placed[$0]?.owner == owner }) ?? 0
            if inCell >= Self.maxPerOwnerInCell { return .ownerInCell }
            if state.cells[cell] == nil, state.cells.count >= Self.maxCells { return .boardFull }
            state.placed[channelId] = (cell, owner)
            state.announcedBy[owner, default: 0] += 1
        }
        state.cells[cell, default: [:]][channelId] = until
        if let listed = state.cells[cell], listed.count > Self.maxPerCell, let soonest = listed.min(by: { $0.value < $1.value })?.key {
            state.remove(soonest)
        }
        return nil
    }

    /// Cells on the board now (the gauge `gateway_ptt_nearby_cells`).
    var cellCount: Int { state.withLock { $0.cells.count } }

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
        for (_, listed) in state.cells {
            for (channelId, until) in listed where until <= now { state.remove(channelId) }
        }
    }
}

import Foundation
import Testing
import WhisperShared
@testable import GatewayService

/// The nearby board's fair shares (`NearbyBoard`): no identity fills a cell or the
/// board, and an announcement that does not fit is refused with its reason.
@Suite struct NearbyBoardTests {
    private let now: Int64 = 1_800_000_000_000
    private func channel(_ n: Int) -> String { String(format: "00000000-0000-4000-8000-%012d", n) }
    private func owner(_ n: Int) -> String {
        let letters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        let code = (0..<12).map { letters[(n >> (5 * ($0 % 6))) & 31] }
        return "WSP-\(String(code[0..<4]))-\(String(code[4..<8]))-\(String(code[8..<12]))"
    }

    @Test func anIdentityTakesAFairShareOfACellAndOfTheBoard() {
        let board = NearbyBoard(ttl: .seconds(30))
        let until = now + 30_000
        let alice = owner(1), bob = owner(2)
        for index in 0..<NearbyBoard.maxPerOwnerInCell {
            #expect(board.record(channel(index), cell: "c23nb", until: until, owner: alice, now: now) == nil)
        }
        #expect(board.record(channel(90), cell: "c23nb", until: until, owner: alice, now: now) == .ownerInCell)
        #expect(board.record(channel(91), cell: "c23nb", until: until, owner: bob, now: now) == nil, "another identity has its own share")
        // A renewal is always taken.
        #expect(board.record(channel(0), cell: "c23nb", until: until + 10_000, owner: alice, now: now + 10_000) == nil)
        // Over all cells: maxPerOwner.
        var cells = ["c23nc", "c23nd", "c23ne", "c23nf", "c23ng", "c23nh", "c23nj"]
        var placed = NearbyBoard.maxPerOwnerInCell
        var next = 10
        while placed < NearbyBoard.maxPerOwner {
            #expect(board.record(channel(next), cell: cells.removeFirst(), until: until, owner: alice, now: now) == nil)
            placed += 1
            next += 1
        }
        #expect(board.record(channel(next), cell: "c23nk", until: until, owner: alice, now: now) == .owner)
        #expect(!board.channels(in: ["c23nk"], now: now).contains(channel(next)), "a refused announcement is not listed")
        // Stopping one frees a place.
        #expect(board.record(channel(1), cell: nil, until: 0, owner: alice, now: now) == nil)
        #expect(board.record(channel(next), cell: "c23nk", until: until, owner: alice, now: now) == nil)
        // Moving a channel to another cell keeps the owner's count right.
        #expect(board.record(channel(2), cell: "c23nm", until: until, owner: alice, now: now) == nil)
        #expect(board.record(channel(next + 1), cell: "c23np", until: until, owner: alice, now: now) == .owner)
        // A lapsed announcement frees its place too.
        let later = until + 1
        #expect(board.record(channel(next + 1), cell: "c23np", until: later + 30_000, owner: alice, now: later) == nil)
    }

    @Test func aFullBoardRefusesANewCellButNotACellItHolds() {
        let board = NearbyBoard(ttl: .seconds(30))
        let until = now + 30_000
        let alphabet = Array("0123456789bcdefghjkmnpqrstuvwxyz")
        func cell(_ n: Int) -> String { String((0..<5).map { alphabet[(n >> (5 * $0)) & 31] }) }
        for index in 0..<NearbyBoard.maxCells {
            let refusal = board.record(channel(index), cell: cell(index), until: until, owner: owner(index / NearbyBoard.maxPerOwner), now: now)
            #expect(refusal == nil)
            if refusal != nil { return }
        }
        #expect(board.cellCount == NearbyBoard.maxCells)
        let newcomer = owner(999_999)
        #expect(board.record(channel(200_000), cell: cell(NearbyBoard.maxCells), until: until, owner: newcomer, now: now) == .boardFull)
        #expect(board.record(channel(200_001), cell: cell(5), until: until, owner: newcomer, now: now) == nil, "a cell the board holds still takes channels")
    }

    @Test func theOwnerTravelsWithTheAnnouncement() {
        let board = NearbyBoard(ttl: .seconds(30))
        let alice = owner(7)
        for index in 0...NearbyBoard.maxPerOwnerInCell {
            board.apply(Array(NearbyBoard.encode(channelId: channel(index), cell: "u09tv", until: now + 20_000, owner: alice).utf8), now: now)
        }
        #expect(board.channels(in: ["u09tv"], now: now).count == NearbyBoard.maxPerOwnerInCell, "over the share from another gateway: not listed")
        // Without a valid owner: not believed.
        board.apply(Array("\(channel(50)) u09tv \(now + 20_000)".utf8), now: now)
        board.apply(Array("\(channel(51)) u09tv \(now + 20_000) nobody".utf8), now: now)
        #expect(board.channels(in: ["u09tv"], now: now).count == NearbyBoard.maxPerOwnerInCell)
        board.apply(Array(NearbyBoard.encode(channelId: channel(0), cell: nil, until: 0, owner: alice).utf8), now: now)
        #expect(board.channels(in: ["u09tv"], now: now).count == NearbyBoard.maxPerOwnerInCell - 1)
    }
}

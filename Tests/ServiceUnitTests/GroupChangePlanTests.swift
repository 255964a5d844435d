import Testing
@testable import RouterService
import WhisperShared

/// The rules of `group_update` (docs/protocol.md section 6) as `GroupChangePlan` decides
/// them, without Postgres.
@Suite struct GroupChangePlanTests {
    /// A group of `members` in joining order, the first its owner, at version 7.
    static func group(_ members: [String], title: String = "Walks") -> GroupView {
        var roles: [String: String] = [:]
        for (index, member) in members.enumerated() { roles[member] = index == 0 ? "owner" : "member" }
        return GroupView(groupId: "grp-1", epoch: 7, title: title, createdBy: members.first, createdAt: 0, memberIds: members, roles: roles)
    }

    static func plan(
        _ before: GroupView, by author: String, adds: [String] = [], removes: [String] = [], strangers: [String] = [], title: String? = nil,
        invitees: [String] = []
    ) throws(WhisperError) -> GroupChangePlan {
        try GroupChangePlan(
            before: before, role: before.roles[author] ?? "", author: author, adds: adds, removes: removes, strangers: strangers, title: title,
            invitees: invitees
        )
    }

    @Test func theOwnerAddsPeersInvitesStrangersAndWithdrawsInvitations() throws {
        let plan = try Self.plan(Self.group(["ann", "bob"]), by: "ann", adds: ["cat", "dan"], removes: ["eve"], strangers: ["dan"], invitees: ["eve"])
        #expect(plan.added == ["cat"] && plan.invited == ["dan"] && plan.withdrawn == ["eve"] && plan.removed.isEmpty)
        #expect(plan.remaining == ["ann", "bob", "cat"] && plan.epoch == 8 && plan.heir == nil && plan.changesSomething)
    }

    @Test func onlyTheOwnerTouchesOthersAndAnyMemberRenamesOrLeaves() throws {
        let group = Self.group(["ann", "bob", "cat"])
        #expect(throws: WhisperError.self) { try Self.plan(group, by: "bob", removes: ["cat"]) }
        #expect(throws: WhisperError.self) { try Self.plan(group, by: "bob", adds: ["dan"]) }
        let renamed = try Self.plan(group, by: "bob", title: "Hikes")
        #expect(renamed.title == "Hikes" && renamed.epoch == 7 && !renamed.changesMembers && renamed.changesSomething)
        let left = try Self.plan(group, by: "bob", removes: ["bob"])
        #expect(left.removed == ["bob"] && left.remaining == ["ann", "cat"] && left.epoch == 8)
    }

    @Test func theOwnerLeavingHandsOverToTheEarliestMemberAndTheLastLeavingEndsTheGroup() throws {
        let handedOver = try Self.plan(Self.group(["ann", "bob", "cat"]), by: "ann", removes: ["ann"])
        #expect(handedOver.heir == "bob" && handedOver.remaining == ["bob", "cat"])
        let last = try Self.plan(Self.group(["ann"]), by: "ann", removes: ["ann"])
        #expect(last.remaining.isEmpty && last.heir == nil && last.changesMembers)
    }

    @Test func membersAndOpenInvitationsStayWithinTheBoundTogether() throws {
        let full = (0..<Limits.MAX_GROUP_MEMBERS - 2).map { "m\($0)" }
        let group = Self.group(full)
        // Two places left: an open invitation takes one, so two more are one too many...
        #expect(throws: WhisperError.self) { try Self.plan(group, by: "m0", adds: ["x", "y"], strangers: ["y"], invitees: ["z"]) }
        // ...unless that invitation is withdrawn in the same update.
        let plan = try Self.plan(group, by: "m0", adds: ["x", "y"], removes: ["z"], strangers: ["y"], invitees: ["z"])
        #expect(plan.remaining.count + plan.invited.count == Limits.MAX_GROUP_MEMBERS)
    }

    @Test func nothingToChangeIsNoChange() throws {
        let group = Self.group(["ann", "bob"])
        let plan = try Self.plan(group, by: "ann", adds: ["bob"], removes: ["cat"], title: "Walks")
        #expect(!plan.changesSomething && plan.epoch == 7 && plan.added.isEmpty && plan.withdrawn == ["cat"])
    }
}

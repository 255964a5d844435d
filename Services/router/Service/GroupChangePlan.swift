import WhisperShared

/// What a member's `group_update` does to the group as it stands, decided without I/O
/// (`GroupDesk.update` reads, plans, then writes the plan), by docs/protocol.md section 6's
/// rules: title and leaving for anyone, additions and removals for the owner, invitations
/// for non-peers, at most ``Limits/MAX_GROUP_MEMBERS``, ownership to the earliest member.
struct GroupChangePlan: Equatable {
    /// Invited rather than added (strangers to the owner who are not members).
    var invited: [String]
    var added: [String]
    var removed: [String]
    /// Invitations withdrawn (removals of identities that are not members).
    var withdrawn: [String]
    var title: String
    /// The members after the change, in the order they joined; empty: the group goes.
    var remaining: [String]
    /// The membership version after the change (bumped when members change).
    var epoch: Int64
    /// The member who becomes owner because the owner left.
    var heir: String?
    var changesMembers: Bool { !added.isEmpty || !removed.isEmpty }
    /// False when only invitations (if anything) change.
    let changesSomething: Bool

    /// - Parameters:
    ///   - role: the author's role in `before`.
    ///   - adds, removes: the request's lists, without repeats, disjoint.
    ///   - strangers: those of `adds` who are not direct peers of the author.
    ///   - title: the request's title; nil keeps the group's.
    ///   - invitees: the group's open invitations.
    init(
        before: GroupView, role: String, author: String, adds: [String], removes: [String], strangers: [String], title: String?, invitees: [String]
    ) throws(WhisperError) {
        let touchesOthers = adds.contains { $0 != author } || removes.contains { $0 != author }
        guard !touchesOthers || role == "owner" else {
            throw WhisperError(.forbidden, "only the group's owner may add or remove other members")
        }
        let invited = strangers.filter { !before.isMember($0) }
        let added = adds.filter { !before.isMember($0) && !invited.contains($0) }
        let removed = removes.filter { before.isMember($0) }
        let withdrawn = removes.filter { !before.isMember($0) }
        let remaining = before.memberIds.filter { !removed.contains($0) } + added
        let open = invitees.filter { !withdrawn.contains($0) && !invited.contains($0) }.count
        guard remaining.count + open + invited.count <= Limits.MAX_GROUP_MEMBERS else {
            throw WhisperError(
                .invalidPayload,
                "the group would have \(remaining.count) members and \(open + invited.count) invited; at most \(Limits.MAX_GROUP_MEMBERS) together"
            )
        }
        let title = title ?? before.title
        let membersChange = !added.isEmpty || !removed.isEmpty
        (self.invited, self.added, self.removed, self.withdrawn, self.remaining, self.title) = (invited, added, removed, withdrawn, remaining, title)
        changesSomething = membersChange || title != before.title
        epoch = membersChange ? before.epoch + 1 : before.epoch
        heir = before.owner.flatMap { removed.contains($0) ? remaining.first : nil }
    }
}

import Foundation
import Logging
import Prometheus
import WhisperMessaging
import WhisperShared

enum CallState: String, Sendable {
    case ringing, answered, ended
}

struct CallRecord: Sendable {
    var caller: String
    var callee: String
    var state: CallState
    var reached = false
    var callerSocket: PresenceRecord?
    var calleeSocket: PresenceRecord?
}

/// What the transition script answered.
enum Transition {
    case missing, ended, unchanged
    case done(previous: CallState, created: Int64, reached: Bool)

    init(_ reply: RESPValue) {
        let parts = reply.array ?? []
        switch parts.first?.string {
        case "done":
            self = .done(
                previous: parts.count > 1 ? parts[1].string.flatMap(CallState.init(rawValue:)) ?? .ringing : .ringing,
                created: parts.count > 2 ? parts[2].string.flatMap { Int64($0) } ?? 0 : 0,
                reached: parts.count > 3 && parts[3].string == "1"
            )
        case "ended": self = .ended
        case "unchanged": self = .unchanged
        default: self = .missing
        }
    }
}

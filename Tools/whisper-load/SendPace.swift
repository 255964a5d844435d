import Foundation
import NIOCore

/// How one load sender spaces its sends, the same for every server the generator drives
/// (Whisper's frames or XMPP stanzas): `perSecond` messages a second from `phase` of the
/// first interval on (0: as fast as answers come), never more than `window` unanswered,
/// until `end`.
struct SendPace: Sendable {
    var perSecond: Double
    var phase: Double
    var arrivals: Arrivals
    var window: Int
    var end: ContinuousClock.Instant
}

/// Where a paced sender is in its schedule: the next due time, and the sends that came
/// due while `window` of them waited for an answer (they go as answers come).
struct PaceState {
    var next = ContinuousClock.now
    var due = 0
    var generator = SystemRandomNumberGenerator()
}

/// A socket handler that sends on a `SendPace`. Its state lives on its channel's event
/// loop; the timer runs there too, so a send is never a task or a hop.
protocol PacedSender: AnyObject {
    var pace: SendPace { get }
    var paceState: PaceState { get set }
    /// Messages sent and not yet answered.
    var unanswered: Int { get }
    func sendOne(context: ChannelHandlerContext)
}

extension PacedSender {
    /// The first sends: a full window when unpaced, else the timer from the sender's phase.
    func startSending(context: ChannelHandlerContext) {
        if pace.perSecond <= 0 {
            for _ in 0..<pace.window { sendOne(context: context) }
            return
        }
        paceState.next = .now + .nanoseconds(Int64(1_000_000_000 / pace.perSecond * pace.phase))
        scheduleNext(context: context)
    }

    /// One of the sender's messages was answered: unpaced, the next goes now; paced, one
    /// that came due while the window was full does.
    func answered(context: ChannelHandlerContext) {
        guard ContinuousClock.now < pace.end else { return }
        if pace.perSecond <= 0 {
            sendOne(context: context)
        } else if paceState.due > 0, unanswered < pace.window {
            paceState.due -= 1
            sendOne(context: context)
        }
    }

    /// At each due time a message goes out unless `window` of them wait for their answer.
    private func scheduleNext(context: ChannelHandlerContext) {
        guard paceState.next < pace.end else { return }
        let wait = paceState.next - .now
        let loopBound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: .nanoseconds(max(0, wait.nanoseconds))) {
            let (handler, context) = loopBound.value
            guard context.channel.isActive else { return }
            if handler.unanswered < handler.pace.window {
                handler.sendOne(context: context)
            } else {
                handler.paceState.due += 1
            }
            handler.paceState.next += handler.gap()
            handler.scheduleNext(context: context)
        }
    }

    private func gap() -> Duration {
        let mean = 1_000_000_000 / pace.perSecond
        switch pace.arrivals {
        case .even:
            return .nanoseconds(Int64(mean))
        case .poisson:
            // Exponential gaps with this mean; 1 - u lies in (0, 1], so the log is finite.
            return .nanoseconds(Int64(-log(1 - Double.random(in: 0..<1, using: &paceState.generator)) * mean))
        }
    }
}

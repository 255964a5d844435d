import NIOCore
import Synchronization

/// When the gateway looks at each socket (`SocketHandler.look`): once per ping interval,
/// by one timer per event loop visiting one of `slotCount` slots in turn, so a socket costs
/// a place in an array, not a timer of its own.
final class SocketLooks: Sendable {
    /// The time between two looks at the same socket.
    let interval: TimeAmount
    static let slotCount = 16
    /// One wheel per event loop, made when the loop's first socket joins. A wheel is only
    /// ever touched on its own loop; this lock guards finding it.
    private let wheels = Mutex<[ObjectIdentifier: Wheel]>([:])

    init(interval: TimeAmount) {
        self.interval = interval
    }

    /// The wheel of `eventLoop`; called on that loop, once per socket.
    func wheel(of eventLoop: any EventLoop) -> Wheel {
        wheels.withLock { wheels in
            let key = ObjectIdentifier(eventLoop)
            if let wheel = wheels[key] { return wheel }
            let tick = TimeAmount.nanoseconds(max(1, interval.nanoseconds / Int64(Self.slotCount)))
            let wheel = Wheel(eventLoop: eventLoop, tick: tick)
            wheels[key] = wheel
            return wheel
        }
    }

    /// The sockets of one event loop and its timer. Sendable only so that `SocketLooks`
    /// can hand it out: every method runs on `eventLoop`.
    final class Wheel: @unchecked Sendable {
        let eventLoop: any EventLoop
        let tick: TimeAmount
        private var slots = [[SocketHandler]](repeating: [], count: SocketLooks.slotCount)
        /// The slot the next tick visits.
        private var cursor = 0
        private var count: Int { slots.reduce(0) { $0 + $1.count } }
        /// Runs while the wheel holds a socket.
        private var timer: RepeatedTask?

        init(eventLoop: any EventLoop, tick: TimeAmount) {
            self.eventLoop = eventLoop
            self.tick = tick
        }

        /// Adds a socket to the slot visited last; returns its place.
        func join(_ handler: SocketHandler) -> (slot: Int, index: Int) {
            eventLoop.assertInEventLoop()
            let slot = (cursor + SocketLooks.slotCount - 1) % SocketLooks.slotCount
            slots[slot].append(handler)
            if timer == nil {
                timer = eventLoop.scheduleRepeatedTask(initialDelay: tick, delay: tick) { [self] _ in visit() }
            }
            return (slot, slots[slot].count - 1)
        }

        /// Removes the socket at `place`; the socket moved into its place (the slot's
        /// last) is told its new index.
        func leave(_ place: (slot: Int, index: Int)) {
            eventLoop.assertInEventLoop()
            let last = slots[place.slot].count - 1
            guard place.index <= last else { return }
            if place.index != last {
                slots[place.slot].swapAt(place.index, last)
                slots[place.slot][place.index].moved(to: place.index)
            }
            slots[place.slot].removeLast()
            if count == 0 {
                timer?.cancel()
                timer = nil
            }
        }

        /// The sockets in the wheel, and whether its timer runs (for tests).
        var sockets: Int { count }
        var ticking: Bool { timer != nil }

        private func visit() {
            // A copy: a look may close its socket, which then leaves its slot.
            let visiting = slots[cursor]
            cursor = (cursor + 1) % SocketLooks.slotCount
            for handler in visiting {
                handler.look()
            }
        }
    }
}

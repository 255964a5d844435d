#ifndef WHISPER_CHIREDIS_SHIM_H
#define WHISPER_CHIREDIS_SHIM_H
// Only the protocol pieces of hiredis are used: the reply reader and the
// command formatter. Sockets are owned by SwiftNIO.
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#endif

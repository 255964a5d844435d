// The header declares libFuzzer's driver; this file only gives the target a source.
#include "CFuzzerDriver.h"

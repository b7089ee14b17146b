// AG_ADDRESS_SANITIZER: 1 in a build with AddressSanitizer (scripts/build_sanitize.sh),
// else 0. clang says so with __has_feature, g++ with __SANITIZE_ADDRESS__. Where it is
// 1, ASan's interface (poisoning, fiber switches) is included too; where it is 0,
// ASAN_POISON_MEMORY_REGION and ASAN_UNPOISON_MEMORY_REGION do nothing.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define AG_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AG_ADDRESS_SANITIZER 1
#endif
#endif
#ifndef AG_ADDRESS_SANITIZER
#define AG_ADDRESS_SANITIZER 0
#endif

#if AG_ADDRESS_SANITIZER
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#else
#ifndef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif
#ifndef ASAN_UNPOISON_MEMORY_REGION
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif
#endif

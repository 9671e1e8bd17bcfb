// SPDX-License-Identifier: Apache-2.0
// TANDEM_API marks the symbols libtandem exports; everything else is hidden (-fvisibility=hidden).
#pragma once

#if defined(_WIN32)
#define TANDEM_API __declspec(dllexport)
#else
#define TANDEM_API __attribute__((visibility("default")))
#endif

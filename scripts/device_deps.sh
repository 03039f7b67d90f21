#!/usr/bin/env bash
# The build dependencies for a machine that has a compiler and CUDA but none of the Debian
# development packages (the GPU machine), carried as .deb files in the git-ignored .devdeps/.
#   here:  scripts/device_deps.sh fetch      # apt-get download into .devdeps/debs
#   there: source scripts/device_deps.sh unpack   # dpkg -x into .devdeps/root, set the paths
# The paths are exported only when sourced: PKG_CONFIG_PATH, CMAKE_PREFIX_PATH, LD_LIBRARY_PATH.
set -u
DEBS="nlohmann-json3-dev libcli11-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
      libcpp-httplib-dev libcpp-httplib0.11 libgtest-dev libgmock-dev libbrotli-dev libbrotli1 libssl-dev libssl3
      zlib1g-dev"
DIR=${DEVDEPS:-$PWD/.devdeps}
case "${1:-}" in
  fetch)
    mkdir -p "$DIR/debs" && (cd "$DIR/debs" && apt-get download $DEBS) ;;
  unpack)
    ROOT=$DIR/root
    if [ ! -d "$ROOT/usr" ]; then
      for f in "$DIR"/debs/*.deb; do dpkg -x "$f" "$ROOT"; done
      # The .pc files say prefix=/usr: point them at the unpacked tree.
      find "$ROOT" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$ROOT/usr|" {} +
    fi
    LIB=$ROOT/usr/lib/x86_64-linux-gnu
    export PKG_CONFIG_PATH=$LIB/pkgconfig:$ROOT/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export CMAKE_PREFIX_PATH=$ROOT/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;;
  *) echo "usage: scripts/device_deps.sh fetch | source scripts/device_deps.sh unpack" >&2 ;;
esac

from facefusion_batch.cli import main

main()
